#include "tessera/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

namespace {

std::string kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a file";
}

void check_mode(mode_t mode, const std::string &path, const std::string &what) {
    TESSERA_CHECK(S_ISREG(mode), "cannot read ", what, " '", path, "': it is ", kind_of(mode),
                  ", not a regular file");
}

}  // namespace

int open_regular_file(const std::string &path, const std::string &what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    TESSERA_CHECK(fd >= 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
    struct stat st {};
    const bool stated = ::fstat(fd, &st) == 0;
    const int stat_errno = errno;
    if (!stated || !S_ISREG(st.st_mode)) {
        ::close(fd);
        TESSERA_CHECK(stated, "cannot read ", what, " '", path, "': ", std::strerror(stat_errno));
        check_mode(st.st_mode, path, what);
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

void check_regular_file(const std::string &path, const std::string &what) {
    struct stat st {};
    TESSERA_CHECK(::stat(path.c_str(), &st) == 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
    check_mode(st.st_mode, path, what);
}

std::string read_input_file(const std::string &path, const std::string &what, int64_t max_bytes) {
    const int fd = open_regular_file(path, what);
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    std::string text;
    char buf[1 << 16];
    while (true) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        TESSERA_CHECK(n >= 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
        if (n == 0) return text;
        text.append(buf, static_cast<size_t>(n));
        TESSERA_CHECK(static_cast<int64_t>(text.size()) <= max_bytes, what, " '", path, "' is larger than ",
                      format_bytes(max_bytes), ", the most Tessera reads of such a file (is it the right file?)");
    }
}

}  // namespace tessera
