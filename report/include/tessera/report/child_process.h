// Running another program from a launch/ program, and a private directory for
// what it writes. tessera-bench's measure mode runs tessera-train (alone, or
// under mpirun) this way: the arguments go to the program as they are, one
// argv entry each (posix_spawn, no shell, so a model spec with spaces or
// quotes in it cannot turn into a command), its output goes to files, and a
// run that outlives its time is ended, so that one stuck job cannot hang the
// bench.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// A fresh directory under $TMPDIR (or /tmp), readable only by this user,
// removed with everything in it when this goes away.
class TempDir {
public:
    explicit TempDir(const std::string &prefix);  // "tessera-bench" -> /tmp/tessera-bench.XXXXXX
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }

private:
    std::string path_;
};

// How a child ended.
struct ChildExit {
    int code = -1;         // its exit status, or -1 when a signal ended it
    int signal = 0;        // the signal that ended it, or 0
    bool timed_out = false;  // it ran past its time and was ended (SIGTERM, then SIGKILL)
    bool ok() const { return code == 0; }
};

// Runs `argv` (argv[0] a path, not looked up on PATH) with this process's
// environment, standard input from /dev/null and its standard output and error
// together written to the file `output_path`, and waits for it, at most
// `timeout_s` seconds. Throws tessera::Error naming the program when it
// cannot be started.
ChildExit run_child(const std::vector<std::string> &argv, const std::string &output_path, double timeout_s);

// The directory this program's executable is in (/proc/self/exe), so that a
// program finds its sibling programs wherever the build or install put them.
std::string own_directory();

// The first executable file `name` in the directories of $PATH, or "" if none.
std::string find_on_path(const std::string &name);

// Whether `path` is a file this process may execute.
bool is_executable(const std::string &path);

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

}  // namespace tessera
