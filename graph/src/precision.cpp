#include "tessera/graph/precision.h"

#include <map>
#include <sstream>

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr Precision kPrecisions[] = {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16};

// Graph inputs that get a working copy in the low type: the weights, what the
// trainer feeds and constants (an attention mask). Optimizer state and batch
// norm's running statistics stay f32.
bool gets_working_copy(const TensorInfo &t) {
    if (t.producer != kNoNode || t.type.dtype != DType::F32) return false;
    return t.role == TensorRole::Param || t.role == TensorRole::Data || t.role == TensorRole::Constant;
}

class PrecisionRewrite {
public:
    PrecisionRewrite(const Graph &old, DType low, DType grad)
        : old_(old), low_(low), grad_(grad), map_(old.num_tensors(), kNoTensor) {}

    Graph run() {
        for (TensorId t = 0; t < old_.num_tensors(); t++) {
            const TensorInfo &info = old_.tensor(t);
            if (info.producer == kNoNode)
                map_[t] = new_.add_input(info.name, info.type, info.role, info.init, "precision");
        }
        for (const Node &n : old_.nodes()) copy_node(n);
        for (TensorId t = 0; t < old_.num_tensors(); t++)
            if (old_.tensor(t).updates != kNoTensor) new_.set_updates(map_[t], map_[old_.tensor(t).updates]);
        for (const auto &[key, t] : old_.outputs()) new_.set_output(key, map_[t]);
        return std::move(new_);
    }

    const std::vector<TensorId> &map() const { return map_; }

private:
    void copy_node(const Node &n) {
        TESSERA_CHECK(!n.backward && !n.optimizer && !n.comm, "precision: ", n.call.who(),
                      " is a backward, optimizer or communication node; the precision policy applies to a "
                      "forward graph, before autodiff");
        std::vector<TensorId> in;
        for (TensorId t : n.inputs) in.push_back(working(t, n));
        const TensorRole role = n.outputs.empty() ? TensorRole::Activation : old_.tensor(n.outputs[0]).role;
        std::vector<TensorId> out = new_.add_node(n.call, in, role);
        for (size_t i = 0; i < out.size(); i++) map_[n.outputs[i]] = out[i];
    }

    // What node `n` reads for old tensor `t`: its low-type working copy when it
    // has one (made at its first reader), else its image in the new graph.
    // Batch norm's running statistics are read as they are.
    TensorId working(TensorId t, const Node &n) {
        const bool stats = n.call.kind == OpKind::BatchNormStats && t != n.inputs[0];
        if (stats || !gets_working_copy(old_.tensor(t))) return map_[t];
        auto it = copies_.find(t);
        if (it != copies_.end()) return it->second;
        const std::string name = new_.unique_name(old_.tensor(t).name + "." + dtype_name(low_));
        OpCall cast{OpKind::Cast, name, {{"to", std::string(dtype_name(low_))}}};
        if (old_.tensor(t).role == TensorRole::Param) cast.attrs.set(kGradDtypeAttr, std::string(dtype_name(grad_)));
        TensorId copy = new_.add_node(cast, {map_[t]}, TensorRole::Activation)[0];
        return copies_[t] = copy;
    }

    const Graph &old_;
    const DType low_, grad_;
    Graph new_;
    std::vector<TensorId> map_;
    std::map<TensorId, TensorId> copies_;
};

}  // namespace

Precision precision_from_name(const std::string &name) {
    for (Precision p : kPrecisions)
        if (name == precision_name(p)) return p;
    fail("unknown precision '", name, "'; valid: ", precision_choices(),
         " (bf16 is what to use on a GPU; fp32 is the default)");
}

const char *precision_name(Precision p) {
    switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown precision");
}

std::string precision_choices() {
    std::string s;
    for (Precision p : kPrecisions) s += (s.empty() ? "" : "|") + std::string(precision_name(p));
    return s;
}

GradReduce grad_reduce_from_name(const std::string &name) {
    if (name == "fp32") return GradReduce::F32;
    if (name == "bf16" || name == "fp16") return GradReduce::Low;
    fail("unknown --grad-reduce-dtype '", name, "'; valid: fp32 (the default: weight gradients computed, summed ",
         "and reduced in f32) or bf16 (in the storage type, as Megatron's bf16 default)");
}

const char *grad_reduce_name(GradReduce r) { return r == GradReduce::F32 ? "fp32" : "bf16"; }

namespace {

// The dtype a working copy's gradient is accumulated in ("f32", "bf16"), or
// "" when t is not a weight's working copy.
std::string working_copy_grad_dtype(const Graph &g, TensorId t) {
    const NodeId p = g.tensor(t).producer;
    if (p == kNoNode || g.node(p).call.kind != OpKind::Cast) return "";
    const Attrs &a = g.node(p).call.attrs;
    return a.has(kGradDtypeAttr) ? a.get_string(g.node(p).call.who(), kGradDtypeAttr) : "";
}

}  // namespace

bool gradient_kept_f32(const Graph &g, TensorId t) { return working_copy_grad_dtype(g, t) == "f32"; }

bool gradient_reduced_low(const Graph &g, TensorId t) {
    if (g.tensor(t).grad_of == kNoTensor) return false;
    while (g.tensor(t).grad_of != kNoTensor) t = g.tensor(t).grad_of;
    const std::string grad = working_copy_grad_dtype(g, t);
    return !grad.empty() && grad != "f32";
}

DType storage_dtype(Precision p) {
    switch (p) {
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
    default: return DType::F32;
    }
}

std::vector<TensorId> apply_precision(Graph &g, Precision p, GradReduce grad) {
    const DType low = storage_dtype(p);
    if (low == DType::F32) {
        std::vector<TensorId> same(g.num_tensors());
        for (TensorId t = 0; t < g.num_tensors(); t++) same[t] = t;
        return same;
    }
    PrecisionRewrite rewrite(g, low, grad == GradReduce::F32 ? DType::F32 : low);
    g = rewrite.run();
    return rewrite.map();
}

std::string dtype_summary(const Graph &g) {
    std::map<std::string, int> count;
    for (const TensorInfo &t : g.tensors())
        if (is_floating(t.type.dtype)) count[dtype_name(t.type.dtype)]++;
    std::ostringstream os;
    for (const auto &[name, n] : count) os << (os.tellp() > 0 ? ", " : "") << name << " (" << n << " tensors)";
    return os.str();
}

}  // namespace tessera
