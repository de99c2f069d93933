// Autodiff against finite differences: for each forward operator, a tiny graph
// L = sum(op(params) * R) with a fixed random R, whose every parameter element's
// gradient is compared with a central difference of L evaluated by the plain
// reference evaluator.
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "tessera/error.h"
#include "tessera/exec/reference.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/builder.h"

namespace tessera {
namespace {

// Appends L = sum(y * R) and returns L.
Tensor weighted_sum(Builder &b, Tensor y) {
    Tensor r = b.data("R", y.shape());
    Tensor p = b.mul(y, r);
    Tensor flat = b.reshape(p, {1, p.type().elements()});
    return b.reduce_sum(flat, 1);  // [1]
}

std::vector<float> random_values(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float &x : v) x = d(g);
    return v;
}

struct GradCase {
    std::string name;
    // Builds the operator on params created with b.param; returns its output.
    std::function<Tensor(Builder &)> build;
    double tol = 2e-2;
    float lo = -1, hi = 1;  // range of the parameter values
};

void check_case(const GradCase &c) {
    SCOPED_TRACE(c.name);
    Graph g;
    Builder b(g);
    Tensor y = c.build(b);
    Tensor loss = weighted_sum(b, y);
    std::vector<TensorId> params = g.with_role(TensorRole::Param);
    std::vector<TensorId> grads = append_backward(g, loss.id, params);

    std::map<TensorId, HostBuffer> values;
    uint32_t seed = 1;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.producer != kNoNode) continue;
        if (info.type.dtype == DType::I32) {
            std::vector<int32_t> v(info.type.elements());
            for (size_t k = 0; k < v.size(); k++) v[k] = static_cast<int32_t>((k * 7 + 3) % 5);
            values[t] = to_buffer(v);
        } else if (info.role == TensorRole::Constant) {
            values[t] = to_buffer(std::vector<float>(info.type.elements(), 1.0f));
        } else {
            bool is_param = info.role == TensorRole::Param;
            values[t] = to_buffer(random_values(info.type.elements(), seed++, is_param ? c.lo : -1.0f,
                                                is_param ? c.hi : 1.0f));
        }
    }
    auto loss_at = [&](const std::map<TensorId, HostBuffer> &v) {
        auto out = evaluate_reference(g, v);
        return static_cast<double>(from_buffer<float>(out[loss.id])[0]);
    };
    auto base = evaluate_reference(g, values);
    for (size_t i = 0; i < params.size(); i++) {
        ASSERT_NE(grads[i], kNoTensor) << g.tensor(params[i]).name;
        std::vector<float> analytic = from_buffer<float>(base[grads[i]]);
        std::vector<float> w = from_buffer<float>(values[params[i]]);
        ASSERT_EQ(analytic.size(), w.size());
        const double eps = 1e-2;
        int bad = 0;
        for (size_t k = 0; k < w.size(); k++) {
            auto shifted = values;
            std::vector<float> wp = w, wm = w;
            wp[k] += eps;
            wm[k] -= eps;
            shifted[params[i]] = to_buffer(wp);
            double lp = loss_at(shifted);
            shifted[params[i]] = to_buffer(wm);
            double lm = loss_at(shifted);
            double fd = (lp - lm) / (2 * eps);
            if (std::abs(fd - analytic[k]) > c.tol * (1 + std::abs(fd)) && bad++ < 5)
                ADD_FAILURE() << g.tensor(params[i]).name << "[" << k << "]: autodiff " << analytic[k]
                              << ", finite difference " << fd;
        }
        EXPECT_EQ(bad, 0) << g.tensor(params[i]).name;
    }
}

Tensor p(Builder &b, const char *name, Shape s) { return b.param(name, std::move(s), Init::zeros()); }

TEST(Autodiff, EveryForwardOperatorAgainstFiniteDifferences) {
    std::vector<GradCase> cases = {
        {"matmul", [](Builder &b) { return b.matmul(p(b, "x", {3, 4}), p(b, "w", {4, 5})); }},
        {"matmul_ta", [](Builder &b) { return b.matmul(p(b, "x", {4, 3}), p(b, "w", {4, 5}), true, false); }},
        {"matmul_tb", [](Builder &b) { return b.matmul(p(b, "x", {3, 4}), p(b, "w", {5, 4}), false, true); }},
        {"matmul_tab", [](Builder &b) { return b.matmul(p(b, "x", {4, 3}), p(b, "w", {5, 4}), true, true); }},
        {"batch_matmul",
         [](Builder &b) { return b.batch_matmul(p(b, "x", {2, 3, 4}), p(b, "w", {2, 5, 4}), false, true); }},
        {"bias_add", [](Builder &b) { return b.bias_add(p(b, "x", {3, 4}), p(b, "b", {4})); }},
        {"bias_add_axis1", [](Builder &b) { return b.bias_add(p(b, "x", {2, 3, 2}), p(b, "b", {3}), 1); }},
        {"add", [](Builder &b) { return b.add(p(b, "x", {3, 4}), p(b, "y", {3, 4})); }},
        {"sub", [](Builder &b) { return b.sub(p(b, "x", {3, 4}), p(b, "y", {3, 4})); }},
        {"mul", [](Builder &b) { return b.mul(p(b, "x", {3, 4}), p(b, "y", {3, 4})); }},
        {"scale", [](Builder &b) { return b.scale(p(b, "x", {3, 4}), -2.5); }},
        {"relu", [](Builder &b) { return b.relu(p(b, "x", {3, 4})); }},
        {"gelu", [](Builder &b) { return b.gelu(p(b, "x", {3, 4})); }},
        {"tanh", [](Builder &b) { return b.tanh(p(b, "x", {3, 4})); }},
        {"sigmoid", [](Builder &b) { return b.sigmoid(p(b, "x", {3, 4})); }},
        {"erf", [](Builder &b) { return b.erf(p(b, "x", {3, 4})); }},
        {"softmax", [](Builder &b) { return b.softmax(p(b, "x", {3, 5})); }},
        {"log_softmax", [](Builder &b) { return b.log_softmax(p(b, "x", {3, 5})); }},
        {"softmax_xent",
         [](Builder &b) { return b.softmax_xent(p(b, "x", {4, 5}), b.data("labels", {4}, DType::I32)); }},
        {"layer_norm",
         [](Builder &b) { return b.layer_norm(p(b, "x", {3, 6}), p(b, "g", {6}), p(b, "b", {6})); }},
        {"batch_norm",
         [](Builder &b) { return b.batch_norm(p(b, "x", {4, 3, 2, 2}), p(b, "g", {3}), p(b, "b", {3})); }},
        {"conv2d", [](Builder &b) { return b.conv2d(p(b, "x", {2, 2, 5, 5}), p(b, "w", {3, 2, 3, 3}), 1, 1); }},
        {"conv2d_stride2",
         [](Builder &b) { return b.conv2d(p(b, "x", {1, 2, 6, 6}), p(b, "w", {2, 2, 3, 3}), 2, 1); }},
        {"max_pool2d", [](Builder &b) { return b.max_pool2d(p(b, "x", {2, 2, 4, 4}), 2); }},
        {"avg_pool2d", [](Builder &b) { return b.avg_pool2d(p(b, "x", {2, 2, 4, 4}), 2); }},
        {"global_avg_pool", [](Builder &b) { return b.global_avg_pool(p(b, "x", {2, 3, 3, 2})); }},
        {"permute", [](Builder &b) { return b.permute(p(b, "x", {2, 3, 4}), {2, 0, 1}); }},
        {"reshape", [](Builder &b) { return b.reshape(p(b, "x", {2, 3, 4}), {6, 4}); }},
        {"concat", [](Builder &b) { return b.concat({p(b, "x", {2, 3}), p(b, "y", {2, 2}), p(b, "z", {2, 1})}, 1); }},
        {"slice", [](Builder &b) { return b.slice(p(b, "x", {3, 5}), 1, 1, 4); }},
        {"reduce_sum", [](Builder &b) { return b.reduce_sum(p(b, "x", {3, 4, 2}), 1); }},
        {"reduce_sum_keepdims", [](Builder &b) { return b.reduce_sum(p(b, "x", {3, 4}), 0, true); }},
        {"broadcast", [](Builder &b) { return b.broadcast(p(b, "x", {3, 4}), 1, 2); }},
        {"embedding",
         [](Builder &b) { return b.embedding(p(b, "table", {5, 3}), b.data("ids", {2, 3}, DType::I32)); }},
        {"dropout", [](Builder &b) { return b.dropout(p(b, "x", {4, 5}), 0.3, 7); }},
    };
    // Max-pool gradients are exact away from ties; keep a tie-free range wide.
    for (const GradCase &c : cases) check_case(c);
}

TEST(Autodiff, TensorUsedTwiceAccumulates) {
    // y = x*x + relu(x) uses x three times; dL/dx = (2x + [x>0]) * R.
    check_case({"reuse", [](Builder &b) {
                    Tensor x = p(b, "x", {3, 4});
                    return b.add(b.mul(x, x), b.relu(x));
                }});
    Graph g;
    Builder b(g);
    Tensor x = p(b, "x", {2, 2});
    Tensor y = b.add(b.mul(x, x), b.relu(x));
    Tensor loss = weighted_sum(b, y);
    append_backward(g, loss.id, {x.id});
    int sums = 0;
    for (const Node &n : g.nodes()) sums += n.backward && n.call.name.find("grad_sum") != std::string::npos;
    EXPECT_EQ(sums, 2) << "three uses of x need two accumulating adds";
}

TEST(Autodiff, ChainOfLayersAgainstFiniteDifferences) {
    check_case({"mlp", [](Builder &b) {
                    Tensor x = b.data("x", {4, 6});
                    Tensor h = b.relu(b.bias_add(b.matmul(x, p(b, "w1", {6, 5})), p(b, "b1", {5})));
                    return b.softmax(b.matmul(h, p(b, "w2", {5, 3})));
                }});
}

// The backward rules read the forward shapes after emitting nodes, and every
// node emitted may move the graph's tensors: conv2d's dw once read its kernel
// extents from a freed Shape (found by fuzz_model_spec; the ASan run,
// scripts/sanitize.sh asan, reports it). Graphs of every size up to a few
// reallocations put the move at each of the rules' emits.
TEST(Autodiff, BackwardRulesReadShapesThatStay) {
    for (int extra = 0; extra < 40; extra++) {
        Graph g;
        Builder b(g);
        Tensor x = p(b, "x", {1, 2, 6, 6});
        for (int i = 0; i < extra; i++) x = b.relu(x);
        Tensor y = b.conv2d(x, p(b, "w", {3, 2, 5, 5}), 1, 2);
        Tensor loss = weighted_sum(b, y);
        append_backward(g, loss.id, {g.tensor_named("x"), g.tensor_named("w")});
        for (const Node &n : g.nodes()) {
            if (n.call.name != "conv2d.dw") continue;
            EXPECT_EQ(n.call.attrs.get_int("dw", "kernel_h"), 5) << extra;
            EXPECT_EQ(n.call.attrs.get_int("dw", "kernel_w"), 5) << extra;
        }
    }
}

TEST(Autodiff, GradientsOnlyWhereNeeded) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {2, 3});
    Tensor w = p(b, "w", {3, 3});
    Tensor unused = p(b, "unused", {3});
    Tensor loss = weighted_sum(b, b.matmul(x, w));
    auto grads = append_backward(g, loss.id, {w.id, unused.id});
    EXPECT_NE(grads[0], kNoTensor);
    EXPECT_EQ(grads[1], kNoTensor);
    for (const Node &n : g.nodes())
        if (n.backward) EXPECT_NE(n.call.name, "matmul.dx") << "no gradient for data x is needed";
}

TEST(Autodiff, LossMustBeScalar) {
    Graph g;
    Builder b(g);
    Tensor w = p(b, "w", {3, 3});
    Tensor y = b.relu(w);
    EXPECT_THROW(
        {
            try {
                append_backward(g, y.id, {w.id});
            } catch (const Error &e) {
                EXPECT_NE(std::string(e.what()).find("must be a scalar f32, got f32[3, 3]"), std::string::npos)
                    << e.what();
                throw;
            }
        },
        Error);
}

}  // namespace
}  // namespace tessera
