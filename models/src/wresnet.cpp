// wresnet: the residual networks of He et al. (2016) with every stage's channels
// multiplied by a widening factor, as in Tofu's WResNet experiments (WResNet-152
// at widths 4 to 10 has billions of parameters).
//
// Structure, for depth 18/34 (basic blocks: two 3x3 convs) and 50/101/152
// (bottleneck blocks: 1x1 reduce, 3x3, 1x1 expand by 4):
//   stem:    image >= 64: 7x7 conv stride 2 + 3x3 max pool stride 2 (the ImageNet
//            stem); smaller images: one 3x3 conv stride 1 (the CIFAR stem).
//            The stem has `base` channels and is not widened.
//   stages:  four, with base * width * {1, 2, 4, 8} inner channels; the first
//            block of stages 2-4 has stride 2. Where a block changes the shape,
//            its shortcut is a 1x1 conv (with the block's stride) + batch norm.
//   head:    global average pool, linear to the classes.
// Every conv is followed by batch norm; convs carry no bias. With width 1, base 64,
// image 224 and 1000 classes the parameter counts are those of torchvision's
// resnet18 ... resnet152.
#include <array>

#include "zoo_internal.h"

namespace tessera::zoo {

namespace {

struct Variant {
    int64_t depth;
    bool bottleneck;
    std::array<int64_t, 4> blocks;
};

constexpr Variant kVariants[] = {
    {18, false, {2, 2, 2, 2}}, {34, false, {3, 4, 6, 3}},  {50, true, {3, 4, 6, 3}},
    {101, true, {3, 4, 23, 3}}, {152, true, {3, 8, 36, 3}},
};

std::string depth_list() {
    std::string out;
    for (const Variant &v : kVariants) out += str(out.empty() ? "" : ", ", v.depth);
    return out;
}

Tensor conv_bn(Builder &b, const std::string &name, Tensor x, int64_t channels, int kernel, int stride,
               bool relu) {
    auto scope = b.scope(name);
    Tensor h = b.batch_norm_layer(b.conv(x, channels, kernel, stride));
    return relu ? b.relu(h) : h;
}

// One residual block with `inner` channels inside; a bottleneck block outputs 4 * inner.
Tensor block(Builder &b, Tensor x, bool bottleneck, int64_t inner, int stride) {
    const int64_t out = bottleneck ? 4 * inner : inner;
    Tensor h;
    if (bottleneck) {
        h = conv_bn(b, "conv1", x, inner, 1, 1, true);
        h = conv_bn(b, "conv2", h, inner, 3, stride, true);
        h = conv_bn(b, "conv3", h, out, 1, 1, false);
    } else {
        h = conv_bn(b, "conv1", x, inner, 3, stride, true);
        h = conv_bn(b, "conv2", h, inner, 3, 1, false);
    }
    Tensor shortcut = x;
    if (stride != 1 || x.dim(1) != out) shortcut = conv_bn(b, "shortcut", x, out, 1, stride, false);
    return b.relu(b.add(h, shortcut));
}

Model build(const Params &p, int64_t batch) {
    const int64_t depth = p.get("depth", 50);
    const int64_t width = p.get("width", 1, 1, 1024);
    const int64_t image = p.get("image", 32, 1, 65536);
    const int64_t channels = p.get("channels", 3, 1, 65536);
    const int64_t classes = p.get("classes", 10, 2);
    const int64_t base = p.get("base", 64, 1, 65536);
    const Variant *variant = nullptr;
    for (const Variant &v : kVariants)
        if (v.depth == depth) variant = &v;
    if (variant == nullptr)
        p.fail("depth = ", depth, " is not supported; valid depths: ", depth_list(),
               " (18 and 34 use basic blocks, the others bottleneck blocks)");

    Model m;
    Builder b(m.graph);
    Tensor x = b.data("input", {batch, channels * image * image});
    Tensor labels = b.data("labels", {batch}, DType::I32);
    Tensor h = b.reshape(x, {batch, channels, image, image});
    {
        auto scope = b.scope("stem");
        if (image >= 64) {
            h = conv_bn(b, "conv", h, base, 7, 2, true);
            h = b.max_pool2d(h, 3, 2, 1);
        } else {
            h = conv_bn(b, "conv", h, base, 3, 1, true);
        }
    }
    for (int s = 0; s < 4; s++) {
        const int64_t inner = base * width << s;
        for (int64_t i = 0; i < variant->blocks[s]; i++) {
            auto scope = b.scope(str("stage", s + 1, ".block", i + 1));
            h = block(b, h, variant->bottleneck, inner, s > 0 && i == 0 ? 2 : 1);
        }
    }
    h = b.global_avg_pool(h);
    Tensor logits;
    {
        auto scope = b.scope("fc");
        logits = b.linear(h, classes);
    }
    std::string what = str("wresnet-", depth, " width ", width, " base ", base, ", ", image, "x", image, "x",
                           channels, ", ", classes, " classes");
    finish(m, b, x, labels, logits, 1, what);
    return m;
}

}  // namespace

const ModelDef &wresnet_def() {
    static const ModelDef def{
        "wresnet",
        "wide residual network (Tofu's WResNet) on square images given as [batch, channels*image*image]",
        {{"depth", "50", "18 or 34 (basic blocks), 50, 101 or 152 (bottleneck blocks)"},
         {"width", "1", "widening factor for every stage's channels (Tofu: 4 to 10 at depth 152)"},
         {"image", "32", "image side; >= 64 uses the ImageNet stem (7x7/2 conv + max pool), else a 3x3 conv"},
         {"channels", "3", "input image channels"},
         {"classes", "10", "output classes (at least 2)"},
         {"base", "64", "stem channels and first stage's channels before widening (stages: x1, x2, x4, x8)"}},
        build};
    return def;
}

}  // namespace tessera::zoo
