// norm family: descriptions not yet written.
#include "defs.h"

namespace tessera::lang::defs {

void register_norm(std::vector<Description> &) {}

}  // namespace tessera::lang::defs
