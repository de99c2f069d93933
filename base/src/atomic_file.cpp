#include "tessera/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "tessera/error.h"

namespace tessera {

namespace {

namespace fs = std::filesystem;

std::string where(const std::string &what, const std::string &path) {
    return "cannot write " + (what.empty() ? std::string() : what + " ") + "'" + path + "'";
}

// Throws if a write to std::cout failed; `error` is the errno of the write
// just made (0 when the failure came earlier, and its reason is lost).
void check_stdout(int error) {
    TESSERA_CHECK(!std::cout.fail(), "cannot write to standard output: ",
                  error ? std::strerror(error) : "an earlier write failed");
}

// `path` with the symbolic links of its last component followed (a link
// to a link too); a dangling link gives the path it names, to be created.
// Gives up after 40 links, as the kernel does (ELOOP).
std::string follow_links(const std::string &path, const std::string &where_text) {
    fs::path p(path);
    for (int links = 0;; links++) {
        std::error_code ec;
        if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
        TESSERA_CHECK(links < 40, where_text, ": too many levels of symbolic links");
        const fs::path next = fs::read_symlink(p, ec);
        TESSERA_CHECK(!ec, where_text, ": cannot read the symbolic link '", p.string(), "': ", ec.message());
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
}

}  // namespace

std::string atomic_temp_prefix(const std::string &path) {
    return "." + fs::path(path).filename().string() + ".tmp.";
}

AtomicFile::AtomicFile(std::string path, std::string what) : dest_(std::move(path)), what_(std::move(what)) {
    target_ = follow_links(dest_, where(what_, dest_));
    struct stat st {};
    if (::stat(target_.c_str(), &st) != 0 || S_ISREG(st.st_mode)) {
        create_temporary(target_);
        // A replaced file keeps its permissions (the temporary one has the umask's).
        if (S_ISREG(st.st_mode)) ::fchmod(fd_, st.st_mode & 07777);
        return;
    }
    TESSERA_CHECK(!S_ISDIR(st.st_mode), where(what_, dest_), ": it is a directory");
    // A device or a FIFO: written directly, as a shell redirection would.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) failed("open");
}

void AtomicFile::create_temporary(const std::string &target) {
    const fs::path p(target);
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0; fd_ < 0; attempt++) {
        const std::string name = atomic_temp_prefix(target) + std::to_string(::getpid()) + "." +
                                 std::to_string(counter++);
        path_ = (p.parent_path() / name).string();
        fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ < 0 && (errno != EEXIST || attempt > 100)) {
            const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
            const int error = errno;
            path_.clear();
            fail(where(what_, dest_), ": cannot create a file in '", dir, "': ", std::strerror(error));
        }
    }
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !path_.empty()) ::unlink(path_.c_str());
}

void AtomicFile::write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) failed("write");
        p += w;
        n -= static_cast<size_t>(w);
    }
}

void AtomicFile::commit() {
    const bool direct = path_.empty();
    if (!direct && ::fsync(fd_) != 0) failed("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) failed("close");
    if (!direct && ::rename(path_.c_str(), target_.c_str()) != 0) failed("rename");
    committed_ = true;
    if (direct) return;
    // Best effort: some file systems refuse to fsync a directory.
    const fs::path parent = fs::path(target_).parent_path();
    const int dfd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void AtomicFile::failed(const char *call) const {
    fail(where(what_, dest_), ": ", call, " failed: ", std::strerror(errno));
}

void write_file_atomically(const std::string &path, const std::string &contents, const std::string &what) {
    AtomicFile f(path, what);
    f.write(contents);
    f.commit();
}

void write_output(const std::string &path, const std::string &contents) {
    if (!path.empty()) return write_file_atomically(path, contents, "");
    const bool earlier = std::cout.fail();
    errno = 0;
    std::cout << contents << std::flush;
    check_stdout(earlier ? 0 : errno);
}

void flush_stdout() {
    const bool earlier = std::cout.fail();
    errno = 0;
    std::cout.flush();
    check_stdout(earlier ? 0 : errno);
}

}  // namespace tessera
