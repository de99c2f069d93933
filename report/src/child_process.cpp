#include "tessera/report/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tessera/error.h"
#include "tessera/tunables.h"

extern char **environ;

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// posix_spawn's file actions, freed on every path out: standard input from
// /dev/null, standard output and error both to one file (one open file, so
// that neither overwrites the other).
class SpawnFiles {
public:
    explicit SpawnFiles(const std::string &output_path) {
        posix_spawn_file_actions_init(&actions_);
        posix_spawn_file_actions_addopen(&actions_, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions_, STDOUT_FILENO, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0600);
        posix_spawn_file_actions_adddup2(&actions_, STDOUT_FILENO, STDERR_FILENO);
    }
    ~SpawnFiles() { posix_spawn_file_actions_destroy(&actions_); }
    SpawnFiles(const SpawnFiles &) = delete;
    SpawnFiles &operator=(const SpawnFiles &) = delete;
    const posix_spawn_file_actions_t *get() const { return &actions_; }

private:
    posix_spawn_file_actions_t actions_;
};

ChildExit exit_of(int status) {
    ChildExit e;
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    return e;
}

// waitpid without blocking; -1 for "still running".
int poll_child(pid_t pid) {
    int status = 0;
    pid_t got;
    do {
        got = waitpid(pid, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    TESSERA_INTERNAL_ASSERT(got >= 0, "waitpid(", pid, ") failed: ", std::strerror(errno));
    return got == 0 ? -1 : status;
}

// Waits for `pid` up to `deadline`; -1 if it is still running then.
int wait_until(pid_t pid, Clock::time_point deadline) {
    for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
        const int status = poll_child(pid);
        if (status >= 0 || Clock::now() >= deadline) return status;
        std::this_thread::sleep_for(pause);
    }
}

// SIGTERM (mpirun passes it on to its ranks), then SIGKILL if it lingers.
int end_child(pid_t pid) {
    kill(pid, SIGTERM);
    int status = wait_until(pid, Clock::now() + std::chrono::seconds(5));
    if (status >= 0) return status;
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

}  // namespace

TempDir::TempDir(const std::string &prefix) {
    std::string tmp = env_text("TMPDIR").value_or("");
    if (tmp.empty()) tmp = "/tmp";
    std::string pattern = tmp + "/" + prefix + ".XXXXXX";
    TESSERA_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot make a temporary directory '", pattern,
                  "': mkdtemp: ", std::strerror(errno), "; set TMPDIR to a writable directory");
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

ChildExit run_child(const std::vector<std::string> &argv, const std::string &output_path, double timeout_s) {
    TESSERA_INTERNAL_ASSERT(!argv.empty(), "run_child without a program");
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    SpawnFiles files(output_path);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], files.get(), nullptr, args.data(), environ);
    TESSERA_CHECK(rc == 0, "cannot start '", argv[0], "': posix_spawn: ", std::strerror(rc));
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    const int status = wait_until(pid, deadline);
    if (status >= 0) return exit_of(status);
    ChildExit e = exit_of(end_child(pid));
    e.timed_out = true;
    return e;
}

std::string own_directory() {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    TESSERA_CHECK(!ec, "cannot find this program's own path: readlink /proc/self/exe: ", ec.message());
    return exe.parent_path().string();
}

bool is_executable(const std::string &path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string find_on_path(const std::string &name) {
    const std::optional<std::string> path = env_text("PATH");
    if (!path) return "";
    const std::string &dirs = *path;
    for (size_t start = 0; start <= dirs.size();) {
        size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
        if (is_executable(dir + "/" + name)) return dir + "/" + name;
        start = end + 1;
    }
    return "";
}

int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    return std::max(1, CPU_COUNT(&set));
}

}  // namespace tessera
