// ONNX files (import_onnx): the protobuf, its opset, initializers and input,
// the constant folding of shape computations, each operator's mapping onto
// the graph, and the loss on the logits. A model the importer accepts must
// also be whole: every initial value it carries fills its tensor exactly,
// since the trainer copies those values into the tensors as they are.
#include "fuzz_common.h"
#include "tessera/models/onnx_import.h"

namespace {

void expect_values_fill_their_tensors(const tessera::Model &m) {
    for (const auto &[name, values] : m.values) {
        const std::optional<tessera::TensorId> id = m.graph.find_tensor(name);
        const int64_t held = static_cast<int64_t>(values.dtype == tessera::DType::F32 ? values.f32.size()
                                                                                     : values.i32.size());
        if (id && m.graph.tensor(*id).type.dtype == values.dtype && m.graph.tensor(*id).type.elements() == held)
            continue;
        std::fprintf(stderr, "finding: the initial values of '%s' (%lld of them) do not fill a tensor of that name\n",
                     name.c_str(), static_cast<long long>(held));
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string path = tessera::fuzz::write_temp(data, size, ".onnx");
    tessera::fuzz::expect_only_user_errors([&] {
        const tessera::Model m = tessera::import_onnx(tessera::ModelSpec{path, {}}, 2);
        expect_values_fill_their_tensors(m);
    });
    return 0;
}
