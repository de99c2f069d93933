// cnn: a small convolutional classifier for 28x28 grey images. It takes the same
// flat [batch, 784] input as the MLP, so one Fashion-MNIST feed serves both.
// Each stage is conv ('same' padding, no bias: batch norm's beta plays that role)
// -> batch norm -> ReLU, `depth` times (VGG-style), then 2x2 max pool; then one
// hidden fully connected layer.
#include "zoo_internal.h"

namespace tessera::zoo {

namespace {

constexpr int64_t kImage = 28;

Model build(const Params &p, int64_t batch) {
    // Each pool halves the side (rounding down): 28 -> 14 -> 7 -> 3 -> 1.
    const int64_t convs = p.get("convs", 2, 1, 4);
    const int64_t channels = p.get("channels", 32, 1, 65536);
    const int64_t depth = p.get("depth", 1, 1, 64);
    const int64_t kernel = p.get("kernel", 3, 1, 27);
    const int64_t hidden = p.get("hidden", 256, 0);
    const int64_t classes = p.get("classes", 10, 2);
    if (kernel % 2 == 0)
        p.fail("parameter kernel = ", kernel, " must be odd, so that 'same' padding (kernel / 2 on each side) ",
               "keeps the image size; try ", kernel - 1, " or ", kernel + 1);

    Model m;
    Builder b(m.graph);
    Tensor x = b.data("input", {batch, kImage * kImage});
    Tensor labels = b.data("labels", {batch}, DType::I32);
    Tensor h = b.reshape(x, {batch, 1, kImage, kImage});
    std::string what = str("cnn ", convs, convs > 1 ? " convs " : " conv ");
    int64_t c = channels;
    for (int64_t i = 1; i <= convs; i++, c *= 2) {
        for (int64_t j = 1; j <= depth; j++) {
            auto scope = b.scope(depth == 1 ? str("conv", i) : str("conv", i, ".", j));
            h = b.relu(b.batch_norm_layer(b.conv(h, c, static_cast<int>(kernel))));
            if (j == depth) h = b.max_pool2d(h, 2);
        }
        what += str(i > 1 ? "-" : "", c);
    }
    if (depth > 1) what += str(" x", depth);
    h = b.reshape(h, {batch, h.type().elements() / batch});
    what += str(" k", kernel);
    if (hidden > 0) {
        auto scope = b.scope("fc");
        h = b.relu(b.linear(h, hidden));
        what += str(", fc ", hidden);
    }
    Tensor logits;
    {
        auto scope = b.scope("out");
        logits = b.linear(h, classes);
    }
    finish(m, b, x, labels, logits, 1, str(what, ", ", classes, " classes"));
    return m;
}

}  // namespace

const ModelDef &cnn_def() {
    static const ModelDef def{
        "cnn",
        "conv-batchnorm-relu-maxpool stages for 28x28x1 images given as [batch, 784], then fully connected",
        {{"convs", "2", "number of conv stages, 1 to 4 (each halves the image: 28, 14, 7, 3, 1)"},
         {"channels", "32", "channels of the first conv; each later conv doubles them"},
         {"depth", "1", "convs per stage (conv-batchnorm-relu each), before the stage's pool"},
         {"kernel", "3", "odd conv kernel size, with 'same' padding"},
         {"hidden", "256", "width of the hidden fully connected layer; 0 = none"},
         {"classes", "10", "output classes (at least 2)"}},
        build};
    return def;
}

}  // namespace tessera::zoo
