// A builder that reads like model code:
//
//   Builder b(g);
//   Tensor x = b.data("images", {batch, 784});
//   auto scope = b.scope("fc1");
//   Tensor h = b.relu(b.linear(x, 1024));
//
// Every call appends one node (or, for layers such as linear and conv2d, the
// nodes and parameters of the layer) to the graph. Nothing allocates tensor
// memory. Names are prefixed by the open scopes ("block3.conv1.w").
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

class Builder;

// A handle to a graph tensor. Cheap to copy.
struct Tensor {
    TensorId id = kNoTensor;
    const Graph *graph = nullptr;

    const TensorType &type() const { return graph->tensor(id).type; }
    const Shape &shape() const { return type().shape; }
    int64_t dim(int i) const;  // negative i counts from the end
    int rank() const { return type().rank(); }
    const std::string &name() const { return graph->tensor(id).name; }
};

class Builder {
public:
    explicit Builder(Graph &g) : g_(g) {}
    Graph &graph() { return g_; }

    // Name scopes. The returned guard closes the scope when it goes out of scope.
    class Scope {
    public:
        Scope(Builder &b, const std::string &name);
        ~Scope();
        Scope(const Scope &) = delete;
        Scope &operator=(const Scope &) = delete;

    private:
        Builder &b_;
    };
    [[nodiscard]] Scope scope(const std::string &name) { return Scope(*this, name); }
    std::string scoped(const std::string &name) const;  // "block3.conv1" + "." + name

    // Graph inputs.
    Tensor data(const std::string &name, Shape shape, DType dtype = DType::F32);
    Tensor param(const std::string &name, Shape shape, Init init);
    Tensor state(const std::string &name, Shape shape, Init init);  // OptState, updated by the step

    // One operator. `name` (scoped) names the node; empty picks "<op>".
    std::vector<Tensor> op(OpKind kind, const std::vector<Tensor> &inputs, Attrs attrs = {},
                           const std::string &name = "");
    Tensor op1(OpKind kind, const std::vector<Tensor> &inputs, Attrs attrs = {},
               const std::string &name = "");

    // Operators.
    Tensor matmul(Tensor a, Tensor b, bool transpose_a = false, bool transpose_b = false);
    Tensor batch_matmul(Tensor a, Tensor b, bool transpose_a = false, bool transpose_b = false);
    Tensor bias_add(Tensor x, Tensor bias, int axis = -1);
    Tensor add(Tensor a, Tensor b);
    Tensor sub(Tensor a, Tensor b);
    Tensor mul(Tensor a, Tensor b);
    Tensor scale(Tensor x, double alpha);
    Tensor relu(Tensor x);
    Tensor gelu(Tensor x);
    Tensor tanh(Tensor x);
    Tensor sigmoid(Tensor x);
    Tensor erf(Tensor x);
    Tensor softmax(Tensor x);
    Tensor log_softmax(Tensor x);
    Tensor softmax_xent(Tensor logits, Tensor labels);  // mean loss, shape []
    Tensor layer_norm(Tensor x, Tensor gamma, Tensor beta, double eps = 1e-5);
    Tensor batch_norm(Tensor x, Tensor gamma, Tensor beta, double eps = 1e-5);
    Tensor conv2d(Tensor x, Tensor w, int stride = 1, int pad = 0);
    Tensor max_pool2d(Tensor x, int kernel, int stride = 0, int pad = 0);  // stride 0: = kernel
    Tensor avg_pool2d(Tensor x, int kernel, int stride = 0, int pad = 0);
    Tensor global_avg_pool(Tensor x);
    Tensor permute(Tensor x, std::vector<int64_t> perm);
    Tensor reshape(Tensor x, Shape shape);
    Tensor concat(const std::vector<Tensor> &xs, int axis);
    Tensor slice(Tensor x, int axis, int64_t start, int64_t end);
    Tensor reduce_sum(Tensor x, int axis, bool keepdims = false);
    Tensor broadcast(Tensor x, int axis, int64_t extent);
    Tensor embedding(Tensor table, Tensor ids);
    Tensor dropout(Tensor x, double rate, int64_t seed);

    // Layers: create their parameters under the current scope.
    // linear: x [..., in] -> [..., out], weight "w" [in, out] (He or Xavier),
    // bias "b" [out] (zeros).
    enum class WeightInit { He, Xavier };
    Tensor linear(Tensor x, int64_t out, bool bias = true, WeightInit init = WeightInit::He);
    // conv: weight "w" [co, ci, k, k], He init, no bias.
    Tensor conv(Tensor x, int64_t out_channels, int kernel, int stride = 1, int pad = -1);
    // batch norm over channels (axis 1): "gamma" (ones), "beta" (zeros), and
    // the running statistics PyTorch keeps, "running_mean" (zeros) and
    // "running_var" (ones), with momentum 0.1.
    Tensor batch_norm_layer(Tensor x);
    // A node that updates batch norm's running statistics (OptState tensors
    // [C]) in place with x's batch statistics each training step. It is off the
    // loss's path, so autodiff leaves it alone and evaluation does not run it.
    void track_running_statistics(Tensor x, Tensor running_mean, Tensor running_var, double momentum,
                                  const std::string &name = "");
    // layer norm over the last axis: "gamma" (ones), "beta" (zeros).
    Tensor layer_norm_layer(Tensor x);

private:
    Tensor layer_param(const std::string &name, Shape shape, Init init);
    Tensor layer_state(const std::string &name, Shape shape, Init init);
    Tensor wrap(TensorId id) const { return Tensor{id, &g_}; }
    std::string node_name(OpKind kind, const std::string &name) const;

    Graph &g_;
    std::vector<std::string> scopes_;
};

}  // namespace tessera
