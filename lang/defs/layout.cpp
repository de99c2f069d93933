// layout family: descriptions not yet written.
#include "defs.h"

namespace tessera::lang::defs {

void register_layout(std::vector<Description> &) {}

}  // namespace tessera::lang::defs
