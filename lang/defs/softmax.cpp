// softmax family: descriptions not yet written.
#include "defs.h"

namespace tessera::lang::defs {

void register_softmax(std::vector<Description> &) {}

}  // namespace tessera::lang::defs
