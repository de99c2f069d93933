#include "tessera/graph/builder.h"

#include "tessera/error.h"

namespace tessera {

int64_t Tensor::dim(int i) const {
    int r = rank();
    int j = i < 0 ? i + r : i;
    TESSERA_INTERNAL_ASSERT(j >= 0 && j < r, "dimension ", i, " of ", type_str(type()));
    return shape()[j];
}

Builder::Scope::Scope(Builder &b, const std::string &name) : b_(b) { b_.scopes_.push_back(name); }
Builder::Scope::~Scope() { b_.scopes_.pop_back(); }

std::string Builder::scoped(const std::string &name) const {
    std::string out;
    for (const std::string &s : scopes_) out += s + ".";
    return out + name;
}

std::string Builder::node_name(OpKind kind, const std::string &name) const {
    return g_.unique_name(scoped(name.empty() ? op_name(kind) : name));
}

Tensor Builder::data(const std::string &name, Shape shape, DType dtype) {
    return wrap(g_.add_data(scoped(name), TensorType{dtype, std::move(shape)}));
}

Tensor Builder::param(const std::string &name, Shape shape, Init init) {
    return wrap(g_.add_param(scoped(name), TensorType{DType::F32, std::move(shape)}, init));
}

Tensor Builder::state(const std::string &name, Shape shape, Init init) {
    return wrap(g_.add_opt_state(scoped(name), TensorType{DType::F32, std::move(shape)}, init));
}

std::vector<Tensor> Builder::op(OpKind kind, const std::vector<Tensor> &inputs, Attrs attrs,
                                const std::string &name) {
    std::vector<TensorId> ids;
    for (const Tensor &t : inputs) ids.push_back(t.id);
    OpCall call{kind, node_name(kind, name), std::move(attrs)};
    std::vector<Tensor> out;
    for (TensorId t : g_.add_node(std::move(call), ids)) out.push_back(wrap(t));
    return out;
}

Tensor Builder::op1(OpKind kind, const std::vector<Tensor> &inputs, Attrs attrs, const std::string &name) {
    auto out = op(kind, inputs, std::move(attrs), name);
    TESSERA_INTERNAL_ASSERT(out.size() == 1, op_name(kind), " has ", out.size(), " outputs");
    return out[0];
}

Tensor Builder::matmul(Tensor a, Tensor b, bool ta, bool tb) {
    return op1(OpKind::Matmul, {a, b}, {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}});
}
Tensor Builder::batch_matmul(Tensor a, Tensor b, bool ta, bool tb) {
    return op1(OpKind::BatchMatmul, {a, b}, {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}});
}
Tensor Builder::bias_add(Tensor x, Tensor bias, int axis) {
    return op1(OpKind::BiasAdd, {x, bias}, {{"axis", int64_t{axis}}});
}
Tensor Builder::add(Tensor a, Tensor b) { return op1(OpKind::Add, {a, b}); }
Tensor Builder::sub(Tensor a, Tensor b) { return op1(OpKind::Sub, {a, b}); }
Tensor Builder::mul(Tensor a, Tensor b) { return op1(OpKind::Mul, {a, b}); }
Tensor Builder::scale(Tensor x, double alpha) { return op1(OpKind::Scale, {x}, {{"alpha", alpha}}); }
Tensor Builder::relu(Tensor x) { return op1(OpKind::Relu, {x}); }
Tensor Builder::gelu(Tensor x) { return op1(OpKind::Gelu, {x}); }
Tensor Builder::tanh(Tensor x) { return op1(OpKind::Tanh, {x}); }
Tensor Builder::sigmoid(Tensor x) { return op1(OpKind::Sigmoid, {x}); }
Tensor Builder::erf(Tensor x) { return op1(OpKind::Erf, {x}); }
Tensor Builder::softmax(Tensor x) { return op1(OpKind::Softmax, {x}); }
Tensor Builder::log_softmax(Tensor x) { return op1(OpKind::LogSoftmax, {x}); }
Tensor Builder::softmax_xent(Tensor logits, Tensor labels) {
    return op1(OpKind::SoftmaxXent, {logits, labels}, {}, "loss");
}
Tensor Builder::layer_norm(Tensor x, Tensor gamma, Tensor beta, double eps) {
    return op1(OpKind::LayerNorm, {x, gamma, beta}, {{"eps", eps}});
}
Tensor Builder::batch_norm(Tensor x, Tensor gamma, Tensor beta, double eps) {
    return op1(OpKind::BatchNorm, {x, gamma, beta}, {{"eps", eps}});
}
Tensor Builder::conv2d(Tensor x, Tensor w, int stride, int pad) {
    return op1(OpKind::Conv2d, {x, w},
               {{"stride_h", int64_t{stride}}, {"stride_w", int64_t{stride}}, {"pad_h", int64_t{pad}},
                {"pad_w", int64_t{pad}}});
}

namespace {
Attrs pool_attrs(int kernel, int stride, int pad) {
    int64_t s = stride > 0 ? stride : kernel;
    return {{"kernel_h", int64_t{kernel}}, {"kernel_w", int64_t{kernel}}, {"stride_h", s},
            {"stride_w", s}, {"pad_h", int64_t{pad}}, {"pad_w", int64_t{pad}}};
}
}  // namespace

Tensor Builder::max_pool2d(Tensor x, int kernel, int stride, int pad) {
    return op1(OpKind::MaxPool2d, {x}, pool_attrs(kernel, stride, pad));
}
Tensor Builder::avg_pool2d(Tensor x, int kernel, int stride, int pad) {
    return op1(OpKind::AvgPool2d, {x}, pool_attrs(kernel, stride, pad));
}
Tensor Builder::global_avg_pool(Tensor x) { return op1(OpKind::GlobalAvgPool, {x}); }
Tensor Builder::permute(Tensor x, std::vector<int64_t> perm) {
    return op1(OpKind::Permute, {x}, {{"perm", std::move(perm)}});
}
Tensor Builder::reshape(Tensor x, Shape shape) {
    return op1(OpKind::Reshape, {x}, {{"shape", std::move(shape)}});
}
Tensor Builder::concat(const std::vector<Tensor> &xs, int axis) {
    return op1(OpKind::Concat, xs, {{"axis", int64_t{axis}}});
}
Tensor Builder::slice(Tensor x, int axis, int64_t start, int64_t end) {
    return op1(OpKind::Slice, {x}, {{"axis", int64_t{axis}}, {"start", start}, {"end", end}});
}
Tensor Builder::reduce_sum(Tensor x, int axis, bool keepdims) {
    return op1(OpKind::ReduceSum, {x}, {{"axis", int64_t{axis}}, {"keepdims", int64_t{keepdims}}});
}
Tensor Builder::broadcast(Tensor x, int axis, int64_t extent) {
    return op1(OpKind::Broadcast, {x}, {{"axis", int64_t{axis}}, {"extent", extent}});
}
Tensor Builder::embedding(Tensor table, Tensor ids) { return op1(OpKind::Embedding, {table, ids}); }
Tensor Builder::dropout(Tensor x, double rate, int64_t seed) {
    return op1(OpKind::Dropout, {x}, {{"rate", rate}, {"seed", seed}});
}

// Layer parameters are named after the open scope ("fc1.w"); a second unscoped
// layer gets "w_1" rather than an error, so quick experiments need no scopes.
Tensor Builder::layer_param(const std::string &name, Shape shape, Init init) {
    return wrap(g_.add_param(g_.unique_name(scoped(name)), TensorType{DType::F32, std::move(shape)}, init));
}

Tensor Builder::layer_state(const std::string &name, Shape shape, Init init) {
    return wrap(g_.add_opt_state(g_.unique_name(scoped(name)), TensorType{DType::F32, std::move(shape)}, init));
}

Tensor Builder::linear(Tensor x, int64_t out, bool bias, WeightInit init) {
    int64_t in = x.dim(-1);
    Init w_init = init == WeightInit::He ? Init::he_normal(in) : Init::xavier_uniform(in, out);
    Tensor w = layer_param("w", {in, out}, w_init);
    Tensor y;
    if (x.rank() == 2) {
        y = matmul(x, w);
    } else {
        // [..., in] -> [rows, in] -> [rows, out] -> [..., out]
        Shape out_shape = x.shape();
        out_shape.back() = out;
        y = reshape(matmul(reshape(x, {x.type().elements() / in, in}), w), out_shape);
    }
    if (!bias) return y;
    return bias_add(y, layer_param("b", {out}, Init::zeros()), -1);
}

Tensor Builder::conv(Tensor x, int64_t out_channels, int kernel, int stride, int pad) {
    TESSERA_CHECK(x.rank() == 4, scoped("conv"), ": input must be [N, C, H, W], got ", type_str(x.type()));
    int64_t ci = x.dim(1);
    Tensor w = layer_param("w", {out_channels, ci, kernel, kernel}, Init::he_normal(ci * kernel * kernel));
    return conv2d(x, w, stride, pad < 0 ? kernel / 2 : pad);
}

Tensor Builder::batch_norm_layer(Tensor x) {
    int64_t c = x.dim(1);
    Tensor gamma = layer_param("gamma", {c}, Init::constant(1));
    Tensor beta = layer_param("beta", {c}, Init::zeros());
    Tensor y = batch_norm(x, gamma, beta);
    track_running_statistics(x, layer_state("running_mean", {c}, Init::zeros()),
                             layer_state("running_var", {c}, Init::constant(1)), 0.1);
    return y;
}

void Builder::track_running_statistics(Tensor x, Tensor running_mean, Tensor running_var, double momentum,
                                       const std::string &name) {
    std::vector<Tensor> updated =
        op(OpKind::BatchNormStats, {x, running_mean, running_var}, {{"momentum", momentum}}, name);
    g_.set_updates(updated[0].id, running_mean.id);
    g_.set_updates(updated[1].id, running_var.id);
}

Tensor Builder::layer_norm_layer(Tensor x) {
    int64_t d = x.dim(-1);
    Tensor gamma = layer_param("gamma", {d}, Init::constant(1));
    Tensor beta = layer_param("beta", {d}, Init::zeros());
    return layer_norm(x, gamma, beta);
}

}  // namespace tessera
