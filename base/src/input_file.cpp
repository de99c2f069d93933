#include "tessera/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

std::string read_input_file(const std::string &path, const std::string &what, int64_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TESSERA_CHECK(fd >= 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    TESSERA_CHECK(::fstat(fd, &st) == 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
    TESSERA_CHECK(!S_ISDIR(st.st_mode), "cannot read ", what, " '", path, "': it is a directory");
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
