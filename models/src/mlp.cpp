// mlp: fully connected layers with ReLU between them. The default,
// 784-1024-1024-10, is the MLP of the Fashion-MNIST run.
#include "zoo_internal.h"

namespace tessera::zoo {

namespace {

// A layer is a matmul, a bias_add and a ReLU.
constexpr int64_t kOperatorsPerLayer = 3;

Model build(const Params &p, int64_t batch) {
    const int64_t layers = p.get("layers", 3, 1, kMaxOperators / kOperatorsPerLayer);
    const int64_t hidden = p.get("hidden", 1024), input = p.get("input", 784);
    const int64_t classes = p.get("classes", 10, 2);

    Model m;
    Builder b(m.graph);
    Tensor x = b.data("input", {batch, input});
    Tensor labels = b.data("labels", {batch}, DType::I32);
    Tensor h = x;
    std::string widths = str(input);
    for (int64_t i = 1; i <= layers; i++) {
        bool last = i == layers;
        int64_t out = last ? classes : hidden;
        auto scope = b.scope(str("fc", i));
        h = b.linear(h, out);
        if (!last) h = b.relu(h);
        widths += str("-", out);
    }
    finish(m, b, x, labels, h, 1, "mlp " + widths);
    return m;
}

}  // namespace

const ModelDef &mlp_def() {
    static const ModelDef def{
        "mlp",
        "multilayer perceptron on flat f32 inputs (Fashion-MNIST by default); ReLU between layers",
        {{"layers", "3", "number of linear layers (1 = a linear classifier)"},
         {"hidden", "1024", "width of every hidden layer"},
         {"input", "784", "input features per sample"},
         {"classes", "10", "output classes (at least 2)"}},
        build};
    return def;
}

}  // namespace tessera::zoo
