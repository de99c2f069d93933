// Reverse-mode autodiff. Each forward operator has one rule that emits the
// backward operators of lang/ for its inputs; contributions to a tensor used
// more than once are summed with `add` nodes as they arrive, so the gradient of
// a tensor is complete once every node after it has been visited.
#include "tessera/graph/autodiff.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "tessera/error.h"
#include "tessera/graph/precision.h"

namespace tessera {

namespace {

class Differentiator {
public:
    explicit Differentiator(Graph &g) : g_(g), grad_(g.num_tensors(), kNoTensor) {}

    std::vector<TensorId> run(TensorId loss, const std::vector<TensorId> &wrt, TensorId seed) {
        const TensorInfo &l = g_.tensor(loss);
        TESSERA_CHECK(l.type.dtype == DType::F32 && l.type.elements() == 1, "autodiff: the loss '",
                      l.name, "' must be a scalar f32, got ", type_str(l.type));
        const int forward_nodes = g_.num_nodes();
        std::vector<bool> wanted = needs_grad(wrt, forward_nodes);
        std::vector<bool> feeds_loss = reaches(loss, forward_nodes);

        if (seed == kNoTensor)
            seed = g_.add_constant(g_.unique_name(l.name + ".grad_seed"), l.type, Init::constant(1));
        TESSERA_INTERNAL_ASSERT(g_.tensor(seed).type == g_.tensor(loss).type, "the loss's seed must be ",
                                type_str(g_.tensor(loss).type));
        grad_.resize(g_.num_tensors(), kNoTensor);
        grad_[loss] = seed;
        g_.set_grad_of(seed, loss);

        for (NodeId n = forward_nodes - 1; n >= 0; n--) {
            if (!feeds_loss[n]) continue;
            const Node node = g_.node(n);  // copy: appending nodes may reallocate
            bool any_input = false;
            for (TensorId t : node.inputs) any_input = any_input || wanted[t];
            bool any_grad = false;
            for (TensorId t : node.outputs) any_grad = any_grad || grad_[t] != kNoTensor;
            if (!any_input || !any_grad) continue;
            current_ = n;
            differentiate(node, wanted);
        }
        std::vector<TensorId> out;
        for (TensorId t : wrt) out.push_back(t < static_cast<TensorId>(grad_.size()) ? grad_[t] : kNoTensor);
        return out;
    }

private:
    // Tensors whose gradient is wanted: the `wrt` tensors and everything computed
    // from them by the forward nodes.
    std::vector<bool> needs_grad(const std::vector<TensorId> &wrt, int forward_nodes) {
        std::vector<bool> w(g_.num_tensors(), false);
        for (TensorId t : wrt) w[t] = true;
        for (NodeId n = 0; n < forward_nodes; n++) {
            const Node &node = g_.node(n);
            bool any = false;
            for (TensorId t : node.inputs) any = any || w[t];
            if (any)
                for (TensorId t : node.outputs)
                    if (differentiable(g_.tensor(t).type.dtype)) w[t] = true;
        }
        return w;
    }

    // Gradients flow through f32, bf16 and f16 tensors (not ids, nor the f64
    // statistics of batch norm).
    static bool differentiable(DType t) { return t == DType::F32 || is_half(t); }

    // Nodes the loss depends on.
    std::vector<bool> reaches(TensorId loss, int forward_nodes) {
        std::vector<bool> needed_tensor(g_.num_tensors(), false), needed(forward_nodes, false);
        needed_tensor[loss] = true;
        for (NodeId n = forward_nodes - 1; n >= 0; n--) {
            const Node &node = g_.node(n);
            bool any = false;
            for (TensorId t : node.outputs) any = any || needed_tensor[t];
            if (!any) continue;
            needed[n] = true;
            for (TensorId t : node.inputs) needed_tensor[t] = true;
        }
        return needed;
    }

    // The gradient of output i of the node, or a zero-free fallback: outputs
    // with no gradient (unused by the loss) cannot occur for single-output
    // operators, and the multi-output forward operators have none.
    TensorId dy(const Node &node, int i = 0) {
        TensorId g = grad_[node.outputs[i]];
        TESSERA_INTERNAL_ASSERT(g != kNoTensor, "no gradient for output ", i, " of ", node.call.who());
        return g;
    }

    TensorId emit(const Node &fwd, const std::string &suffix, OpKind kind, const std::vector<TensorId> &in,
                  Attrs attrs = {}) {
        auto outs = emit_multi(fwd, suffix, kind, in, std::move(attrs));
        return outs[0];
    }

    std::vector<TensorId> emit_multi(const Node &fwd, const std::string &suffix, OpKind kind,
                                     const std::vector<TensorId> &in, Attrs attrs = {}) {
        std::string name = g_.unique_name(fwd.call.name + "." + suffix);
        auto outs = g_.add_node(OpCall{kind, name, std::move(attrs)}, in, TensorRole::Gradient);
        g_.set_node_flags(g_.num_nodes() - 1, true, false);
        g_.set_forward(g_.num_nodes() - 1, current_);
        grad_.resize(g_.num_tensors(), kNoTensor);
        return outs;
    }

    // A weight's working copy whose gradient stays f32 (precision.h) gets f32
    // contributions: the contribution's node, when it was just emitted and
    // nothing reads it yet, keeps its f32 result; otherwise a cast widens it.
    TensorId widened(const Node &fwd, TensorId contribution) {
        if (!is_half(g_.tensor(contribution).type.dtype)) return contribution;
        const NodeId p = g_.tensor(contribution).producer;
        const Node &made = g_.node(p);
        bool read = false;
        for (NodeId later = p + 1; later < g_.num_nodes() && !read; later++)
            for (TensorId t : g_.node(later).inputs) read = read || t == contribution;
        if (made.backward && made.forward == current_ && has_storage_forms(made.call.kind) && !read) {
            const auto at = std::find(made.outputs.begin(), made.outputs.end(), contribution);
            g_.keep_outputs_f32(p, {static_cast<int64_t>(at - made.outputs.begin())});
            return contribution;
        }
        return emit(fwd, "d_f32", OpKind::Cast, {contribution}, {{"to", std::string("f32")}});
    }

    void accumulate(const Node &fwd, TensorId input, TensorId contribution, const std::vector<bool> &wanted) {
        if (!wanted[input]) return;
        TensorType expect = g_.tensor(input).type;
        if (gradient_kept_f32(g_, input)) {
            contribution = widened(fwd, contribution);
            expect.dtype = DType::F32;
        }
        TESSERA_INTERNAL_ASSERT(expect == g_.tensor(contribution).type, "gradient of '", g_.tensor(input).name,
                                "' from ", fwd.call.who(), " is ", type_str(g_.tensor(contribution).type),
                                ", expected ", type_str(expect));
        // A contribution may be another tensor's gradient passed through (add's
        // backward forwards dy); it stays that tensor's.
        if (g_.tensor(contribution).grad_of == kNoTensor && contribution > input) g_.set_grad_of(contribution, input);
        if (grad_[input] == kNoTensor) {
            grad_[input] = contribution;
            return;
        }
        std::string name = g_.unique_name(g_.tensor(input).name + ".grad_sum");
        auto outs = g_.add_node(OpCall{OpKind::Add, name, {}}, {grad_[input], contribution}, TensorRole::Gradient);
        g_.set_node_flags(g_.num_nodes() - 1, true, false);
        g_.set_forward(g_.num_nodes() - 1, current_);
        g_.set_grad_of(outs[0], input);
        grad_.resize(g_.num_tensors(), kNoTensor);
        grad_[input] = outs[0];
    }

    int64_t attr(const Node &n, const char *name) const { return n.call.attrs.get_int(n.call.who(), name); }

    Attrs copy_attrs(const Node &n, std::initializer_list<const char *> names) const {
        Attrs a;
        for (const char *name : names)
            if (n.call.attrs.has(name)) a.set(name, n.call.attrs.values().at(name));
        return a;
    }

    int normalized_axis(const Node &n, int64_t axis, int rank) const {
        int a = static_cast<int>(axis < 0 ? axis + rank : axis);
        TESSERA_INTERNAL_ASSERT(a >= 0 && a < rank, n.call.who(), ": axis ", axis, " for rank ", rank);
        return a;
    }

    [[noreturn]] void no_rule(const Node &n) const {
        fail("autodiff: ", n.call.who(), " has no backward rule; ", op_name(n.call.kind),
             " is itself a backward or optimizer operator");
    }

    // One rule per forward operator, grouped by lang's operator families.
    void differentiate(const Node &n, const std::vector<bool> &w) {
        const std::string family = op_info(n.call.kind).family;
        if (family == "matmul") matmul_rules(n, w);
        else if (family == "elementwise") elementwise_rules(n, w);
        else if (family == "softmax") softmax_rules(n, w);
        else if (family == "norm") norm_rules(n, w);
        else if (family == "conv") conv_rules(n, w);
        else if (family == "layout") layout_rules(n, w);
        else if (family == "misc") misc_rules(n, w);
        else no_rule(n);
    }

    // Matrix products: y = op(x) op(w).
    void matmul_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        switch (n.call.kind) {
        case OpKind::Matmul:
        case OpKind::BatchMatmul: {
            bool ta = attr(n, "transpose_a"), tb = attr(n, "transpose_b");
            auto mm = [&](const char *suffix, TensorId a, TensorId b, bool t1, bool t2) {
                return emit(n, suffix, n.call.kind, {a, b},
                            {{"transpose_a", int64_t{t1}}, {"transpose_b", int64_t{t2}}});
            };
            TensorId g = dy(n);
            // y = op(x) op(w); each case is dx = ..., dw = ... written out so the
            // transposes stay visible.
            if (want(0)) {
                TensorId dx = !ta ? (!tb ? mm("dx", g, in[1], false, true) : mm("dx", g, in[1], false, false))
                                  : (!tb ? mm("dx", in[1], g, false, true) : mm("dx", in[1], g, true, true));
                accumulate(n, in[0], dx, w);
            }
            if (want(1)) {
                TensorId dw = !tb ? (!ta ? mm("dw", in[0], g, true, false) : mm("dw", in[0], g, false, false))
                                  : (!ta ? mm("dw", g, in[0], true, false) : mm("dw", g, in[0], true, true));
                accumulate(n, in[1], dw, w);
            }
            break;
        }
        default: no_rule(n);
        }
    }

    // Element-wise operators.
    void elementwise_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        switch (n.call.kind) {
        case OpKind::BiasAdd:
            if (want(0)) accumulate(n, in[0], dy(n), w);
            if (want(1))
                accumulate(n, in[1], emit(n, "db", OpKind::BiasAddGrad, {dy(n)}, copy_attrs(n, {"axis"})), w);
            break;
        case OpKind::Add:
            if (want(0)) accumulate(n, in[0], dy(n), w);
            if (want(1)) accumulate(n, in[1], dy(n), w);
            break;
        case OpKind::Sub:
            if (want(0)) accumulate(n, in[0], dy(n), w);
            if (want(1)) accumulate(n, in[1], emit(n, "db", OpKind::Scale, {dy(n)}, {{"alpha", -1.0}}), w);
            break;
        case OpKind::Mul:
            if (want(0)) accumulate(n, in[0], emit(n, "da", OpKind::Mul, {dy(n), in[1]}), w);
            if (want(1)) accumulate(n, in[1], emit(n, "db", OpKind::Mul, {dy(n), in[0]}), w);
            break;
        case OpKind::Scale:
            accumulate(n, in[0], emit(n, "dx", OpKind::Scale, {dy(n)}, copy_attrs(n, {"alpha"})), w);
            break;
        case OpKind::Relu: accumulate(n, in[0], emit(n, "dx", OpKind::ReluGrad, {dy(n), in[0]}), w); break;
        case OpKind::Gelu: accumulate(n, in[0], emit(n, "dx", OpKind::GeluGrad, {dy(n), in[0]}), w); break;
        case OpKind::Erf: accumulate(n, in[0], emit(n, "dx", OpKind::ErfGrad, {dy(n), in[0]}), w); break;
        case OpKind::Tanh:
            accumulate(n, in[0], emit(n, "dx", OpKind::TanhGrad, {dy(n), n.outputs[0]}), w);
            break;
        case OpKind::Sigmoid:
            accumulate(n, in[0], emit(n, "dx", OpKind::SigmoidGrad, {dy(n), n.outputs[0]}), w);
            break;
        default: no_rule(n);
        }
    }

    // Softmax, log-softmax and cross-entropy.
    void softmax_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        switch (n.call.kind) {
        case OpKind::Softmax:
            accumulate(n, in[0], emit(n, "dx", OpKind::SoftmaxGrad, {dy(n), n.outputs[0]}), w);
            break;
        case OpKind::LogSoftmax:
            accumulate(n, in[0], emit(n, "dx", OpKind::LogSoftmaxGrad, {dy(n), n.outputs[0]}), w);
            break;
        case OpKind::SoftmaxXent:
            if (want(0))
                accumulate(n, in[0], emit(n, "dlogits", OpKind::SoftmaxXentGrad, {in[0], in[1], dy(n)}), w);
            break;
        default: no_rule(n);
        }
    }

    // Layer and batch norm: one backward operator gives all three gradients.
    void norm_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        switch (n.call.kind) {
        case OpKind::LayerNorm:
        case OpKind::BatchNorm: {
            OpKind grad = n.call.kind == OpKind::LayerNorm ? OpKind::LayerNormGrad : OpKind::BatchNormGrad;
            auto d = emit_multi(n, "grad", grad, {dy(n), in[0], in[1]}, copy_attrs(n, {"eps"}));
            for (int i = 0; i < 3; i++)
                if (want(i)) accumulate(n, in[i], d[i], w);
            break;
        }
        default: no_rule(n);
        }
    }

    // Convolutions and pooling.
    void conv_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        // Shapes are copied: every node emitted appends to the graph's tensors,
        // which may move them (a reference read a freed Shape after conv2d's dx).
        const Shape x_shape = g_.tensor(in[0]).type.shape;
        switch (n.call.kind) {
        case OpKind::Conv2d: {
            const Shape w_shape = g_.tensor(in[1]).type.shape;
            if (want(0)) {
                Attrs a = copy_attrs(n, {"stride_h", "stride_w", "pad_h", "pad_w"});
                a.set("in_h", x_shape[2]).set("in_w", x_shape[3]);
                accumulate(n, in[0], emit(n, "dx", OpKind::Conv2dGradInput, {dy(n), in[1]}, a), w);
            }
            if (want(1)) {
                Attrs a = copy_attrs(n, {"stride_h", "stride_w", "pad_h", "pad_w"});
                a.set("kernel_h", w_shape[2]).set("kernel_w", w_shape[3]);
                accumulate(n, in[1], emit(n, "dw", OpKind::Conv2dGradWeight, {dy(n), in[0]}, a), w);
            }
            break;
        }
        case OpKind::MaxPool2d:
            accumulate(n, in[0], emit(n, "dx", OpKind::MaxPool2dGrad, {dy(n), in[0]}, n.call.attrs), w);
            break;
        case OpKind::AvgPool2d: {
            Attrs a = n.call.attrs;
            a.set("in_h", x_shape[2]).set("in_w", x_shape[3]);
            accumulate(n, in[0], emit(n, "dx", OpKind::AvgPool2dGrad, {dy(n)}, a), w);
            break;
        }
        case OpKind::GlobalAvgPool:
            accumulate(n, in[0],
                       emit(n, "dx", OpKind::GlobalAvgPoolGrad, {dy(n)},
                            {{"in_h", x_shape[2]}, {"in_w", x_shape[3]}}),
                       w);
            break;
        default: no_rule(n);
        }
    }

    // Layout operators and reductions: each gradient is another layout operator.
    void layout_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        // Shapes are copied: every node emitted appends to the graph's tensors,
        // which may move them (a reference read a freed Shape after conv2d's dx).
        const Shape x_shape = g_.tensor(in[0]).type.shape;
        switch (n.call.kind) {
        case OpKind::Permute: {
            std::vector<int64_t> perm = n.call.attrs.get_ints(n.call.who(), "perm"), inv(perm.size());
            for (size_t i = 0; i < perm.size(); i++) inv[perm[i]] = static_cast<int64_t>(i);
            accumulate(n, in[0], emit(n, "dx", OpKind::Permute, {dy(n)}, {{"perm", inv}}), w);
            break;
        }
        case OpKind::Reshape:
            accumulate(n, in[0], emit(n, "dx", OpKind::Reshape, {dy(n)}, {{"shape", x_shape}}), w);
            break;
        case OpKind::Concat: {
            int axis = normalized_axis(n, attr(n, "axis"), static_cast<int>(x_shape.size()));
            int64_t offset = 0;
            for (size_t i = 0; i < in.size(); i++) {
                int64_t extent = g_.tensor(in[i]).type.shape[axis];
                if (w[in[i]])
                    accumulate(n, in[i],
                               emit(n, "d" + std::to_string(i), OpKind::Slice, {dy(n)},
                                    {{"axis", int64_t{axis}}, {"start", offset}, {"end", offset + extent}}),
                               w);
                offset += extent;
            }
            break;
        }
        case OpKind::Slice: {
            int axis = normalized_axis(n, attr(n, "axis"), static_cast<int>(x_shape.size()));
            accumulate(n, in[0],
                       emit(n, "dx", OpKind::SliceGrad, {dy(n)},
                            {{"axis", int64_t{axis}}, {"start", attr(n, "start")}, {"extent", x_shape[axis]}}),
                       w);
            break;
        }
        case OpKind::ReduceSum: {
            int axis = normalized_axis(n, attr(n, "axis"), static_cast<int>(x_shape.size()));
            TensorId g = dy(n);
            if (n.call.attrs.get_int(n.call.who(), "keepdims", 0)) {
                Shape squeezed = x_shape;
                squeezed.erase(squeezed.begin() + axis);
                if (squeezed.empty()) squeezed = {1};
                g = emit(n, "dy_squeezed", OpKind::Reshape, {g}, {{"shape", squeezed}});
            }
            TensorId dx = emit(n, "dx", OpKind::Broadcast, {g}, {{"axis", int64_t{axis}}, {"extent", x_shape[axis]}});
            if (g_.tensor(dx).type.shape != x_shape)
                dx = emit(n, "dx_shaped", OpKind::Reshape, {dx}, {{"shape", x_shape}});
            accumulate(n, in[0], dx, w);
            break;
        }
        case OpKind::Broadcast:
            accumulate(n, in[0], emit(n, "dx", OpKind::ReduceSum, {dy(n)}, copy_attrs(n, {"axis"})), w);
            break;
        default: no_rule(n);
        }
    }

    // Embedding, dropout and cast.
    void misc_rules(const Node &n, const std::vector<bool> &w) {
        const auto &in = n.inputs;
        auto want = [&](int i) { return w[in[i]]; };
        switch (n.call.kind) {
        case OpKind::Embedding:
            if (want(0)) {
                const Shape table = g_.tensor(in[0]).type.shape;
                accumulate(n, in[0],
                           emit(n, "dtable", OpKind::EmbeddingGrad, {dy(n), in[1]}, {{"vocab", table[0]}}), w);
            }
            break;
        case OpKind::Dropout:
            accumulate(n, in[0], emit(n, "dx", OpKind::Dropout, {dy(n)}, copy_attrs(n, {"rate", "seed"})), w);
            break;
        case OpKind::Cast: {
            // The gradient goes back to the storage type x has (a working
            // copy's f32 gradient is already there).
            const DType x_type = g_.tensor(in[0]).type.dtype;
            if (g_.tensor(dy(n)).type.dtype == x_type) {
                if (w[in[0]]) g_.set_grad_of(dy(n), in[0]);  // the master's gradient, as in fp32
                accumulate(n, in[0], dy(n), w);
                break;
            }
            accumulate(n, in[0], emit(n, "dx", OpKind::Cast, {dy(n)}, {{"to", std::string(dtype_name(x_type))}}), w);
            break;
        }
        default: no_rule(n);
        }
    }

    Graph &g_;
    std::vector<TensorId> grad_;
    NodeId current_ = kNoNode;  // the forward node being differentiated
};

}  // namespace

std::vector<TensorId> append_backward(Graph &g, TensorId loss, const std::vector<TensorId> &wrt, TensorId seed) {
    return Differentiator(g).run(loss, wrt, seed);
}

}  // namespace tessera
