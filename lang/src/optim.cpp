// optim family: not yet implemented.
#include "family.h"

namespace tessera::lang {

std::vector<TensorType> infer_optim(const OpCall &c, const std::vector<TensorType> &) {
    fail(c.who(), ": not implemented yet");
}
StructMap structural_optim(const OpCall &, const std::vector<TensorType> &) { return {}; }
void fill_defaults_optim(OpCall &) {}
void run_optim(const OpCall &c, const std::vector<TensorRef> &, const std::vector<TensorRef> &) {
    fail(c.who(), ": not implemented yet");
}

}  // namespace tessera::lang
