#include "tessera/error.h"

namespace tessera::detail {

void throw_internal(const char *file, int line, const char *condition, const std::string &message) {
    throw InternalError(concat("Internal error at ", file, ":", line, ": condition '", condition,
                               "' failed", message.empty() ? "" : ": ", message,
                               "\nThis is a bug in Tessera; please report it with the command that "
                               "triggered it."));
}

}  // namespace tessera::detail
