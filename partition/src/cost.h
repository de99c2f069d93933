// The cost model of one cut, per operator: for each way to run the operator at
// this level (one of lang/'s strategies, or replicating it when none divides),
// the layout each input must arrive in, what each output comes out as, and the
// bytes every conversion moves. Internal to partition/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/box.h"
#include "tessera/graph/graph.h"
#include "tessera/lang/strategy.h"
#include "tessera/partition/layout.h"

namespace tessera::part {

// How an input must arrive: replicated, or split along `dim` where part p needs
// the rows [(scale*lo + lo_off) / div, (scale*hi + hi_off) / div] (rounding
// down) of the op's split variable's part [lo, hi] (clamped to the input's
// extent), or (`partial`) as the partial sums it is held as.
struct InputNeed {
    bool split = false;
    int dim = -1;
    int64_t scale = 1, lo_off = 0, hi_off = 0;
    bool partial = false;
    int64_t div = 1;
};

enum class OutForm : uint8_t { Split, Partial, Replicated };
struct OutputForm {
    OutForm form = OutForm::Replicated;
    int dim = -1;
};

// The cost of a conversion no collective makes (a split value held as partial
// sums, anything but partial sums read by an operator that adds them as they
// are): far above any real plan's bytes, and small enough
// that thousands of them add up without overflow.
constexpr int64_t kInfeasibleBytes = int64_t{1} << 50;

// The option of an element-wise add (a gradient's accumulation over an RNN's
// time steps) that adds partial sums as they are held, making partial sums:
// addition is linear, so the sum of the addends is the addend of the sum.
constexpr int kAddPartialSums = -2;
constexpr const char *kAddPartialSumsLabel = "add partial sums";

// One way to run a node at one level.
struct NodeOption {
    std::string label;             // "split m", "split k (partial sum)", "replicate"
    int strategy = -1;             // index into OpStrategies::strategies; -1 replicate,
                                   // kAddPartialSums
    int64_t var_extent = 0;        // the split variable's local extent
    std::vector<InputNeed> inputs;
    std::vector<OutputForm> outputs;
    int64_t stage_bytes = 0;       // bytes all-reduced inside the operator (per group)
    std::vector<std::string> stages;
};

// The rows [lo, hi) of an input that the block [var_lo, var_hi) of the split
// variable reads, before clamping to the input (a window's padding reads rows
// below 0).
std::pair<int64_t, int64_t> rows_wanted(const InputNeed &need, int64_t var_lo, int64_t var_hi);
// The same rows as [lo, hi], clamped to [0, extent); empty when hi < lo.
std::pair<int64_t, int64_t> rows_read(const InputNeed &need, int64_t var_lo, int64_t var_hi, int64_t extent);
// lang/'s symbolic need with the operator's sizes put in.
InputNeed evaluate(const tessera::InputNeed &n, const SymEnv &env);
// The extent the split variable has in strategy `s`: the output dimension it
// splits, else the input dimension it indexes one-to-one.
int64_t variable_extent(const Strategy &s, const std::vector<InputNeed> &needs, const std::vector<TensorType> &in,
                        const std::vector<TensorType> &out);

// Spatial windows read with a halo that lowering runs (lower.cpp: the block
// plus its halo, padded at the tensor's true borders, the window's own
// padding off): conv2d, conv2d_grad_weight, avg_pool2d and max_pool2d. `needs`: the option's evaluated input needs. False when no
// input reads a halo or an offset, or when one that cannot run does.
bool halo_lowerable(const OpCall &call, const std::vector<InputNeed> &needs);
// A slice, or its gradient, split along any one dimension; along its own
// axis the block reads the rows `start` away (lower.cpp runs it with its
// start made local).
bool offset_lowerable(const OpCall &call, const std::vector<InputNeed> &needs);
// An option that reads every input whole and splits an output (an input
// gradient along the input's height, whose strided rows bounds inference
// cannot express): lowering runs the operator whole and keeps its block.
bool whole_then_block(const NodeOption &o);
// The input of such an operator that reads the halo (x), or -1.
int halo_input(const OpCall &call);

// The options of a node whose local (op-side) input shapes are `in` and output
// shapes `out`, for a k-way cut: the strategies whose variable has at least k
// elements (split into blocks of ceil and floor size, graph/box.h's
// block_size), then "replicate" (every device computes it whole), then for
// an add of two tensors of its output's type, kAddPartialSums. With
// `executable`, only the strategies lowering can run (lower.h): every split
// input is read without a halo or an offset, and the kernel computes the same
// thing on the block (see runs_on_blocks). Reductions inside an operator run
// through its staged kernels (tessera/lang/staged.h).
std::vector<NodeOption> node_options(const OpCall &call, const OpStrategies *strategies,
                                     const std::vector<TensorType> &in, const std::vector<TensorType> &out,
                                     int k, bool executable = false, bool staged = true);

// One conversion: its kind and total bytes over the k devices of a group.
struct Conversion {
    CommKind kind = CommKind::AllGather;
    int64_t bytes = 0;
};

// The call an operator makes on its blocks: shape attributes (reshape's
// target, broadcast's extent) set for the block `out0` of its first output.
OpCall local_call(const OpCall &call, const Shape &out0);

// Converting an input held as `held` (over the op-side local type `t`) to
// `need`. Partial sums reduce: a reduce-scatter where each part reads exactly
// its block, else an all-reduce.
Conversion input_conversion(const Layout &held, const InputNeed &need, const TensorType &t, int64_t var_extent,
                            int k);
// The type in which partial sums of tensor t of `g` are summed across
// devices, given `local`, the type of the block summed: in f32 for a 16-bit
// tensor that a kernel with storage forms makes (it keeps its f32 result, and
// the sum is rounded once, as one device rounds it), else in t's own type. A
// staged operator's stay in t's type, and so do weight gradients under
// GradReduce::Low (precision.h's gradient_reduced_low).
TensorType partial_sum_type(const Graph &g, TensorId t, const TensorType &local, bool staged);

// Converting an output produced as `form` to the tensor's layout `want`
// (partial sums from partial sums or whole values, not from a split).
Conversion output_conversion(const OutputForm &form, const Layout &want, const TensorType &t, int k);

// The op-side local shapes after running `opt`: inputs as needed, outputs as produced.
TensorType input_after(const TensorType &t, const InputNeed &need, int64_t var_extent, int k);
TensorType output_after(const TensorType &t, const OutputForm &form, int k);

}  // namespace tessera::part
