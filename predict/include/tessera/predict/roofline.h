// Operator times without running anything: the roofline model. An operator is
// bound either by arithmetic or by memory traffic, so its time is the larger of
// flops / peak flop rate and bytes touched / memory bandwidth, plus a fixed
// launch cost. The swap planner uses these times when the device it plans for
// is not the one it runs on (tessera-plan --device h100), and the benchmark
// compares them with profiled times.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/graph/precision.h"
#include "tessera/pipeline/op_times.h"
#include "tessera/pipeline/rank_stages.h"

namespace tessera {

struct RooflineDevice {
    std::string name;
    double flops_per_s = 0;       // fp32, the dense peak an operator can reach
    double bytes_per_s = 0;       // device memory bandwidth
    double launch_s = 0;          // per operator: kernel launch and dispatch
    double link_bytes_per_s = 0;  // device-to-device, for communication nodes
    double host_bytes_per_s = 0;  // host-device copies, one direction: what swapping moves at
    // The host's share that runs this device's host-side optimizer updates
    // (CPU kernels over host memory): memory bandwidth, flop rate, dispatch.
    double host_mem_bytes_per_s = 0;
    double host_flops_per_s = 0;
    double host_launch_s = 0;
    // Matrix products (matmul, batch_matmul, the convolutions) by operand
    // type: tf32 (f32 storage under --precision tf32) and bf16 or f16. Where
    // the device has no faster path they equal flops_per_s.
    double tf32_flops_per_s = 0;
    double half_flops_per_s = 0;
    bool tf32 = false;  // f32 matrix products run as tf32 (set by with_precision)
    bool operator==(const RooflineDevice &) const = default;
};

// The presets, by name:
//   "cpu":  this build machine (2 cores, OpenBLAS), measured; roofline.cpp says
//           how. Halide computes bf16 and f16 in f32 with converted loads and
//           stores, so every precision has the fp32 rate;
//   "h100": NVIDIA H100 SXM: 60 TFLOP/s fp32 without tensor cores (the
//           published peak; large GEMMs measure about 52, but every fp32
//           prediction in docs/benchmarks.md was made with 60), and for
//           matrix products what large GEMMs measure: 370 tf32, 790 bf16 and
//           fp16 (dense, f32 accumulation); 3.35 TB/s HBM3, NVLink 4
//           at 450 GB/s a direction, and 25 GB/s host copies (typical measured
//           PCIe 5 x16 with pinned memory; the one H100 measured here, on
//           2026-11-27, copied at 55 GB/s alone and 46 to 50 GB/s while
//           swapping both ways beside GEMMs: docs/benchmarks.md, GPU
//           measurements; kept at 25 as the swap bars were set against it).
//           Its host: one eighth of a DGX
//           H100's two Xeon 8480C sockets (16 DDR5-4800 channels, 614 GB/s
//           peak, about 430 GB/s reachable, so 50 GB/s per GPU; 14 cores
//           with AVX-512, 1 TFLOP/s), 5 us to dispatch an update.
// Throws tessera::Error listing the valid names for any other name.
RooflineDevice roofline_device(const std::string &name);
// The device with `tf32` set for Precision::TF32.
RooflineDevice with_precision(RooflineDevice dev, Precision p);
// The rate of a matrix product whose operands are `operand`.
double matmul_flops_per_s(const RooflineDevice &dev, DType operand);
std::vector<std::string> roofline_device_names();

// The floating-point operations of one node, from its operator and shapes:
// 2*M*N*K for matmul and batch_matmul; 2 * output elements * (kernel elements
// * input channels) for conv2d, and the same multiply-adds for its two
// gradients; a few per element for elementwise, normalisation, softmax and
// optimizer operators; none for layout operators and communication nodes.
double node_flops(const Graph &g, NodeId n);

// The bytes a node reads and writes: its inputs' and outputs' sizes.
double node_bytes(const Graph &g, NodeId n);

// Per NodeId: max(flops / rate, bytes / bytes_per_s) + launch_s, the rate
// being matmul_flops_per_s() for matrix products and flops_per_s for the
// rest (which compute in f32 whatever they store); for a
// communication node (Node::comm), its input bytes / link_bytes_per_s.
// Throws tessera::Error when a rate the graph needs is not positive.
std::vector<double> roofline_node_times(const Graph &g, const RooflineDevice &dev);

// Per NodeId, for optimizer nodes: the same model with the host's rates
// (host_flops_per_s, host_mem_bytes_per_s, host_launch_s); 0 for the rest.
// What SwapProblem::host_node_time_s takes.
std::vector<double> roofline_host_node_times(const Graph &g, const RooflineDevice &dev);

// Both, with the host link at dev.host_bytes_per_s each way: what the swap
// planner takes (pipeline/op_times.h). The host's times only when `host`
// lets updates run there.
OpTimes roofline_op_times(const Graph &g, const RooflineDevice &dev, HostUpdates host);

// roofline_op_times as the pipeline's OpTimer (pipeline/rank_stages.h): what
// tessera-plan and the step predictor swap with.
OpTimer roofline_timer(const RooflineDevice &dev, HostUpdates host);

}  // namespace tessera
