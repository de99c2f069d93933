// layout family: not yet implemented.
#include "family.h"

namespace tessera::lang {

std::vector<TensorType> infer_layout(const OpCall &c, const std::vector<TensorType> &) {
    fail(c.who(), ": not implemented yet");
}
StructMap structural_layout(const OpCall &, const std::vector<TensorType> &) { return {}; }
void fill_defaults_layout(OpCall &) {}
void run_layout(const OpCall &c, const std::vector<TensorRef> &, const std::vector<TensorRef> &) {
    fail(c.who(), ": not implemented yet");
}

}  // namespace tessera::lang
