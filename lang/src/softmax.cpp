// softmax family: not yet implemented.
#include "family.h"

namespace tessera::lang {

std::vector<TensorType> infer_softmax(const OpCall &c, const std::vector<TensorType> &) {
    fail(c.who(), ": not implemented yet");
}
StructMap structural_softmax(const OpCall &, const std::vector<TensorType> &) { return {}; }
void fill_defaults_softmax(OpCall &) {}
void run_softmax(const OpCall &c, const std::vector<TensorRef> &, const std::vector<TensorRef> &) {
    fail(c.who(), ": not implemented yet");
}

}  // namespace tessera::lang
