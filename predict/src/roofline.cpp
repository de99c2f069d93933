#include "tessera/predict/roofline.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera {
namespace {

// The "cpu" preset: this build machine (2 cores, AVX-512, OpenBLAS).
//   * flops: 3e11. tessera-bench-kernels' 1024^3 matmul (BM_MatmulTessera,
//     OpenBLAS dispatch) reached 327 GFLOP/s on an idle machine (README,
//     Benchmarks); rounded down because smaller GEMMs reach less.
//   * bytes: 1.9e10. memcpy of 256 MiB, best of 8: 9.7 GB/s one way, so 19
//     GB/s counting read plus write, as node_bytes() does (measured with
//     other builds running, load ~3).
//   * host copies: on the CPU device a swap is that same memcpy one way.
//   * launch: 2 us, the executor's dispatch per operator (an estimate).
//   * link: ProfileOptions' default rate for communication nodes (MPI over
//     shared memory on two oversubscribed cores is of that order).
constexpr double kCpuFlops = 3e11;
constexpr double kCpuBytes = 1.9e10;
constexpr double kCpuLaunch = 2e-6;
constexpr double kCpuHost = 9.5e9;
constexpr double kCpuLink = 1e9;

int64_t dim_from_end(const Shape &s, int from_end) {
    TESSERA_INTERNAL_ASSERT(static_cast<int>(s.size()) >= from_end, "shape ", shape_str(s), " has no dimension ",
                            from_end, " from the end");
    return s[s.size() - static_cast<size_t>(from_end)];
}

// Flops per output element of operators whose cost is linear in their size;
// rough counts of the arithmetic each element's formula does (tanh and exp
// taken as a handful of flops), which only matter when an operator is so small
// that bandwidth does not bind.
double per_element_flops(OpKind k) {
    switch (k) {
    case OpKind::BiasAdd:
    case OpKind::BiasAddGrad:
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Scale:
    case OpKind::Relu:
    case OpKind::ReluGrad:
    case OpKind::ReduceSum:
    case OpKind::Dropout:
    case OpKind::Cast:
    case OpKind::EmbeddingGrad:
        return 1;
    case OpKind::Gelu:
    case OpKind::GeluGrad:
        return 12;
    case OpKind::Tanh:
    case OpKind::TanhGrad:
    case OpKind::Sigmoid:
    case OpKind::SigmoidGrad:
    case OpKind::Erf:
    case OpKind::ErfGrad:
        return 6;
    case OpKind::Softmax:
    case OpKind::SoftmaxGrad:
    case OpKind::LogSoftmax:
    case OpKind::LogSoftmaxGrad:
    case OpKind::SoftmaxXent:
    case OpKind::SoftmaxXentGrad:
        return 5;
    case OpKind::LayerNorm:
    case OpKind::BatchNorm:
        return 8;
    case OpKind::BatchNormStats:
        return 4;
    case OpKind::LayerNormGrad:
    case OpKind::BatchNormGrad:
        return 12;
    case OpKind::SgdMomentum:
        return 4;
    case OpKind::Adam:
        return 12;
    case OpKind::NonfiniteCount:
        return 2;
    default:
        return 0;  // layout operators move data only
    }
}

bool is_matrix_product(OpKind k) {
    switch (k) {
    case OpKind::Matmul:
    case OpKind::BatchMatmul:
    case OpKind::Conv2d:
    case OpKind::Conv2dGradInput:
    case OpKind::Conv2dGradWeight: return true;
    default: return false;
    }
}

double compute_rate(const Graph &g, NodeId n, const RooflineDevice &dev) {
    const Node &node = g.node(n);
    if (!is_matrix_product(node.call.kind)) return dev.flops_per_s;
    return matmul_flops_per_s(dev, g.tensor(node.inputs.at(0)).type.dtype);
}

}  // namespace

RooflineDevice roofline_device(const std::string &name) {
    // On the CPU device the host is the device: the same rates.
    if (name == "cpu")
        return {"cpu", kCpuFlops, kCpuBytes, kCpuLaunch, kCpuLink, kCpuHost, kCpuBytes, kCpuFlops, kCpuLaunch,
                kCpuFlops, kCpuFlops};
    if (name == "h100") return {"h100", 60e12, 3.35e12, 5e-6, 450e9, 25e9, 50e9, 1e12, 5e-6, 370e12, 790e12};
    std::string valid;
    for (const std::string &n : roofline_device_names()) valid += (valid.empty() ? "" : ", ") + n;
    fail("unknown roofline device '", name, "'; valid: ", valid);
}

std::vector<std::string> roofline_device_names() { return {"cpu", "h100"}; }

RooflineDevice with_precision(RooflineDevice dev, Precision p) {
    dev.tf32 = p == Precision::TF32;
    return dev;
}

double matmul_flops_per_s(const RooflineDevice &dev, DType operand) {
    const double rate = is_half(operand) ? dev.half_flops_per_s : dev.tf32 ? dev.tf32_flops_per_s : 0;
    return rate > 0 ? rate : dev.flops_per_s;
}

double node_flops(const Graph &g, NodeId n) {
    const Node &node = g.node(n);
    if (node.comm) return 0;
    auto in = [&](size_t i) -> const Shape & { return g.tensor(node.inputs.at(i)).type.shape; };
    auto out_elements = [&](size_t i) { return static_cast<double>(g.tensor(node.outputs.at(i)).type.elements()); };
    const OpCall &c = node.call;
    switch (c.kind) {
    case OpKind::Matmul:
    case OpKind::BatchMatmul: {
        // y = x w: every output element is a K-long dot product.
        bool ta = c.attrs.get_int(c.who(), "transpose_a", 0) != 0;
        int64_t k = dim_from_end(in(0), ta ? 2 : 1);
        return 2.0 * out_elements(0) * static_cast<double>(k);
    }
    case OpKind::Conv2d:
    case OpKind::Conv2dGradInput: {
        // Forward: each output element sums Ci*KH*KW products. The input
        // gradient does the same multiply-adds, spread back over dx; its
        // "output elements" in the forward sense are dy's (input 0).
        const Shape &w = in(1);  // [Co, Ci, KH, KW]
        double per_out = static_cast<double>(num_elements(w) / w.at(0));
        double outs = c.kind == OpKind::Conv2d ? out_elements(0) : static_cast<double>(num_elements(in(0)));
        return 2.0 * outs * per_out;
    }
    case OpKind::Conv2dGradWeight: {
        // dw [Co, Ci, KH, KW] accumulates one product per (dy element, Ci*KH*KW).
        const Shape &dw = g.tensor(node.outputs.at(0)).type.shape;
        double per_out = static_cast<double>(num_elements(dw) / dw.at(0));
        return 2.0 * static_cast<double>(num_elements(in(0))) * per_out;
    }
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d: {
        double window = static_cast<double>(c.attrs.get_int(c.who(), "kernel_h") * c.attrs.get_int(c.who(), "kernel_w"));
        return out_elements(0) * window;
    }
    case OpKind::MaxPool2dGrad:
    case OpKind::AvgPool2dGrad: {
        double window = static_cast<double>(c.attrs.get_int(c.who(), "kernel_h") * c.attrs.get_int(c.who(), "kernel_w"));
        return static_cast<double>(num_elements(in(0))) * window;
    }
    case OpKind::GlobalAvgPool:
        return static_cast<double>(num_elements(in(0)));
    case OpKind::GlobalAvgPoolGrad:
    case OpKind::Embedding:
        return out_elements(0);
    default: {
        // Linear operators: count over the larger side, so that reductions
        // (bias_add_grad, softmax_xent) are charged for what they read.
        double elems = 0;
        for (TensorId t : node.inputs) elems = std::max(elems, static_cast<double>(g.tensor(t).type.elements()));
        for (TensorId t : node.outputs) elems = std::max(elems, static_cast<double>(g.tensor(t).type.elements()));
        return per_element_flops(c.kind) * elems;
    }
    }
}

double node_bytes(const Graph &g, NodeId n) {
    const Node &node = g.node(n);
    double bytes = 0;
    for (TensorId t : node.inputs) bytes += static_cast<double>(g.tensor(t).type.bytes());
    for (TensorId t : node.outputs) bytes += static_cast<double>(g.tensor(t).type.bytes());
    return bytes;
}

std::vector<double> roofline_node_times(const Graph &g, const RooflineDevice &dev) {
    TESSERA_CHECK(dev.flops_per_s > 0 && dev.bytes_per_s > 0 && dev.launch_s >= 0,
                  "roofline device '", dev.name, "' needs positive flops_per_s and bytes_per_s (got ",
                  dev.flops_per_s, " and ", dev.bytes_per_s, ") and launch_s >= 0 (got ", dev.launch_s, ")");
    std::vector<double> times(static_cast<size_t>(g.num_nodes()), 0.0);
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
        const Node &node = g.node(n);
        if (node.comm) {
            TESSERA_CHECK(dev.link_bytes_per_s > 0, "roofline device '", dev.name,
                          "' has no link bandwidth (link_bytes_per_s = ", dev.link_bytes_per_s,
                          ") but communication node '", node.call.name, "' needs one");
            double in_bytes = 0;
            for (TensorId t : node.inputs) in_bytes += static_cast<double>(g.tensor(t).type.bytes());
            times[static_cast<size_t>(n)] = in_bytes / dev.link_bytes_per_s;
            continue;
        }
        times[static_cast<size_t>(n)] =
            std::max(node_flops(g, n) / compute_rate(g, n, dev), node_bytes(g, n) / dev.bytes_per_s) + dev.launch_s;
    }
    return times;
}

std::vector<double> roofline_host_node_times(const Graph &g, const RooflineDevice &dev) {
    TESSERA_CHECK(dev.host_flops_per_s > 0 && dev.host_mem_bytes_per_s > 0 && dev.host_launch_s >= 0,
                  "roofline device '", dev.name, "' needs positive host_flops_per_s and host_mem_bytes_per_s (got ",
                  dev.host_flops_per_s, " and ", dev.host_mem_bytes_per_s, ") and host_launch_s >= 0 (got ",
                  dev.host_launch_s, ")");
    std::vector<double> times(static_cast<size_t>(g.num_nodes()), 0.0);
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
        if (!g.node(n).optimizer || g.node(n).comm) continue;
        times[static_cast<size_t>(n)] = std::max(node_flops(g, n) / dev.host_flops_per_s,
                                                 node_bytes(g, n) / dev.host_mem_bytes_per_s) +
                                        dev.host_launch_s;
    }
    return times;
}

OpTimes roofline_op_times(const Graph &g, const RooflineDevice &dev, HostUpdates host) {
    OpTimes t;
    t.node_time_s = roofline_node_times(g, dev);
    if (host != HostUpdates::Off) t.host_node_time_s = roofline_host_node_times(g, dev);
    t.h2d_bytes_per_s = t.d2h_bytes_per_s = dev.host_bytes_per_s;
    return t;
}

OpTimer roofline_timer(const RooflineDevice &dev, HostUpdates host) {
    return [dev, host](const Graph &g, const std::vector<NodeId> &, int64_t) { return roofline_op_times(g, dev, host); };
}

}  // namespace tessera
