#include "tessera/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "tessera/error.h"

namespace tessera {

namespace {

std::string where(const std::string &what, const std::string &path) {
    return "cannot write " + (what.empty() ? std::string() : what + " ") + "'" + path + "'";
}

}  // namespace

std::string atomic_temp_prefix(const std::string &path) {
    return "." + std::filesystem::path(path).filename().string() + ".tmp.";
}

AtomicFile::AtomicFile(std::string path, std::string what) : dest_(std::move(path)), what_(std::move(what)) {
    const std::filesystem::path p(dest_);
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0; fd_ < 0; attempt++) {
        const std::string name = atomic_temp_prefix(dest_) + std::to_string(::getpid()) + "." +
                                 std::to_string(counter++);
        path_ = (p.parent_path() / name).string();
        fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ < 0 && (errno != EEXIST || attempt > 100)) {
            const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
            fail(where(what_, dest_), ": cannot create a file in '", dir, "': ", std::strerror(errno));
        }
    }
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
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
    if (::fsync(fd_) != 0) failed("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) failed("close");
    if (::rename(path_.c_str(), dest_.c_str()) != 0) failed("rename");
    committed_ = true;
    // Best effort: some file systems refuse to fsync a directory.
    const std::filesystem::path parent = std::filesystem::path(dest_).parent_path();
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

}  // namespace tessera
