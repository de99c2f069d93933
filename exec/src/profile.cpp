#include "tessera/exec/profile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "tessera/align.h"
#include "tessera/error.h"
#include "tessera/lang/kernels.h"
#include "tessera/program/memory_plan.h"
#include "tessera/size.h"

namespace tessera {

namespace {

// Nodes that run the same kernel on the same shapes take the same time.
std::string op_key(const Graph &g, const Node &node) {
    std::string key = op_name(node.call.kind);
    for (const auto &[name, value] : node.call.attrs.values()) key += "|" + name + "=" + attr_str(value);
    for (TensorId t : node.inputs) key += "|" + type_str(g.tensor(t).type);
    return key;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A communication node cannot run alone: its input bytes at the given rate.
double comm_time(const Graph &g, const Node &node, double bytes_per_s) {
    int64_t bytes = 0;
    for (TensorId t : node.inputs) bytes += g.tensor(t).type.bytes();
    return static_cast<double>(bytes) / bytes_per_s;
}

// A node's operands in the arena: inputs and outputs packed from offset 0; an
// in-place output shares its target's input, as it does in a run. `end` is
// the bytes they take.
struct Operands {
    std::vector<TensorRef> inputs, outputs;
    int64_t end = 0;
};

Operands pack_operands(const Graph &g, const Node &node, Device &device) {
    Operands o;
    for (TensorId t : node.inputs) {
        o.inputs.push_back({device.arena() + o.end, g.tensor(t).type});
        o.end += align_up(g.tensor(t).type.bytes(), MemoryPlan::kAlignment);
    }
    for (TensorId t : node.outputs) {
        const TensorInfo &info = g.tensor(t);
        auto target = std::find(node.inputs.begin(), node.inputs.end(), info.updates);
        if (info.updates != kNoTensor && target != node.inputs.end()) {
            o.outputs.push_back({o.inputs[target - node.inputs.begin()].data, info.type});
            continue;
        }
        o.outputs.push_back({device.arena() + o.end, info.type});
        o.end += align_up(info.type.bytes(), MemoryPlan::kAlignment);
    }
    return o;
}

// The median of `repeats` runs of the node on zeroed inputs, after one
// warm-up; `zeros` is a host buffer of zeros, grown as needed.
double time_node(const Node &node, const Operands &o, Device &device, int repeats, std::vector<std::byte> &zeros) {
    // Zeros are valid inputs for every operator (indices and labels 0).
    for (const TensorRef &in : o.inputs) {
        size_t bytes = static_cast<size_t>(in.type.bytes());
        if (zeros.size() < bytes) zeros.assign(bytes, std::byte{0});
        device.copy_to_device(in.data, zeros.data(), bytes);
    }
    Stream &stream = device.stream(StreamKind::Compute);
    device.launch_op(StreamKind::Compute, node.call, o.inputs, o.outputs);  // warm-up
    stream.synchronize();
    std::vector<double> samples;
    for (int r = 0; r < repeats; r++) {
        auto t0 = std::chrono::steady_clock::now();
        device.launch_op(StreamKind::Compute, node.call, o.inputs, o.outputs);
        stream.synchronize();
        samples.push_back(seconds_since(t0));
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

// One entry (-1: not yet timed) per distinct operator of `order`.
std::map<std::string, double> distinct_ops(const Graph &g, const std::vector<NodeId> &order) {
    std::map<std::string, double> measured;
    for (NodeId n : order) {
        TESSERA_CHECK(n >= 0 && n < g.num_nodes(), "profile: node ", n, " does not exist; the graph has ",
                      g.num_nodes(), " nodes");
        const Node &node = g.node(n);
        if (!node.comm) measured.emplace(op_key(g, node), -1.0);
    }
    return measured;
}

}  // namespace

std::vector<double> profile_nodes(const Graph &g, const std::vector<NodeId> &order, Device &device,
                                  const ProfileOptions &options) {
    TESSERA_CHECK(options.repeats >= 1, "profile: repeats must be at least 1, got ", options.repeats);
    TESSERA_CHECK(options.comm_bytes_per_s > 0, "profile: comm_bytes_per_s must be positive, got ",
                  options.comm_bytes_per_s);
    std::map<std::string, double> measured = distinct_ops(g, order);
    const int total = static_cast<int>(measured.size());
    std::vector<double> time(g.num_nodes(), 0.0);
    std::vector<std::byte> zeros;
    int done = 0;
    for (NodeId n : order) {
        const Node &node = g.node(n);
        if (node.comm) {
            time[n] = comm_time(g, node, options.comm_bytes_per_s);
            continue;
        }
        double &t_op = measured.at(op_key(g, node));
        if (t_op >= 0) {
            time[n] = t_op;
            continue;
        }
        const Operands o = pack_operands(g, node, device);
        if (o.end > device.arena_bytes() && node.optimizer && options.skip_oversized_optimizer) {
            t_op = 0;
            if (options.progress) options.progress(++done, total);
            continue;
        }
        TESSERA_CHECK(o.end <= device.arena_bytes(), "profiling node '", node.call.name, "' (",
                      op_name(node.call.kind), ") needs ", o.end, " bytes (", format_bytes(o.end),
                      ") for its inputs and outputs, but the ", device.name(), " device arena has ",
                      device.arena_bytes(), " bytes (", format_bytes(device.arena_bytes()), "); use --device-mem ",
                      size_flag_at_least(o.end), " or more");
        t_op = time_node(node, o, device, options.repeats, zeros);
        time[n] = t_op;
        if (options.progress) options.progress(++done, total);
    }
    return time;
}

std::vector<double> profile_host_nodes(const Graph &g, const std::vector<NodeId> &order, int repeats) {
    TESSERA_CHECK(repeats >= 1, "profile: repeats must be at least 1, got ", repeats);
    std::map<std::string, double> measured;
    std::vector<double> time(g.num_nodes(), 0.0);
    for (NodeId n : order) {
        const Node &node = g.node(n);
        if (!node.optimizer || node.comm) continue;
        auto [it, fresh] = measured.emplace(op_key(g, node), 0.0);
        if (fresh) {
            // Zeroed host buffers (8-byte aligned); outputs apart from inputs.
            std::vector<std::vector<double>> store;
            std::vector<TensorRef> inputs, outputs;
            auto buffer = [&](TensorId t) {
                store.emplace_back(static_cast<size_t>(g.tensor(t).type.bytes() + 7) / 8, 0.0);
                return TensorRef{store.back().data(), g.tensor(t).type};
            };
            store.reserve(node.inputs.size() + node.outputs.size());
            for (TensorId t : node.inputs) inputs.push_back(buffer(t));
            for (TensorId t : node.outputs) outputs.push_back(buffer(t));
            run_op(node.call, inputs, outputs);  // warm-up
            std::vector<double> samples;
            for (int r = 0; r < repeats; r++) {
                auto t0 = std::chrono::steady_clock::now();
                run_op(node.call, inputs, outputs);
                samples.push_back(seconds_since(t0));
            }
            std::sort(samples.begin(), samples.end());
            it->second = samples[samples.size() / 2];
        }
        time[n] = it->second;
    }
    return time;
}

double measure_copy_bandwidth(Device &device, CopyDirection dir, int64_t bytes) {
    TESSERA_CHECK(bytes > 0 && bytes <= device.arena_bytes(), "measure_copy_bandwidth: ", bytes,
                  " bytes must be positive and fit the ", device.name(), " device arena of ", device.arena_bytes(),
                  " bytes");
    constexpr int kRuns = 5;
    PinnedBuffer host = device.allocate_host(static_cast<size_t>(bytes));
    std::memset(host.data(), 0, static_cast<size_t>(bytes));  // touch every page before timing
    const bool h2d = dir == CopyDirection::HostToDevice;
    const StreamKind s = h2d ? StreamKind::SwapIn : StreamKind::SwapOut;
    void *dst = h2d ? static_cast<void *>(device.arena()) : static_cast<void *>(host.data());
    const void *src = h2d ? static_cast<const void *>(host.data()) : static_cast<const void *>(device.arena());
    double best = 0;
    for (int r = 0; r <= kRuns; r++) {  // run 0 warms up
        auto t0 = std::chrono::steady_clock::now();
        device.copy_async(s, dst, src, static_cast<size_t>(bytes), dir);
        device.stream(s).synchronize();
        double t = seconds_since(t0);
        if (r > 0 && (best == 0 || t < best)) best = t;
    }
    // A clock too coarse to see the copy: report it as taking one tick.
    best = std::max(best, 1e-9);
    return static_cast<double>(bytes) / best;
}

}  // namespace tessera
