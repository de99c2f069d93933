// Partition strategies of every operator, as plain data.
//
// The table was derived at build time by tools/strategyc.cpp, which runs Halide's
// bounds inference over each operator's description (Tofu's interval analysis):
// it splits one index variable's range into [lo, hi] and asks which region of each
// input is needed. The runtime only reads the result; it never links libHalide.
//
// Regions are affine: along a split input dimension, [scale*lo + lo_offset,
// scale*hi + hi_offset], divided (rounding down) by `divisor`, which is 1 except
// where rows of the input are longer than rows of the output (a reshape that
// merges dimensions: output row m reads input row m / H). The coefficients are
// polynomials over symbols: attribute names ("stride_h") and input extents
// ("in0.2" is input 0's dimension 2).
//
// Halide's bounds inference cannot derive a reshape's splits (its index is a
// division and a modulo of a linear index), so reshape's strategies are built
// from its shapes at run time (reshape_strategies below) on top of what the
// analysis found.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/lang/op.h"

namespace tessera {

// Values of the symbols a SymPoly may mention.
using SymEnv = std::map<std::string, int64_t>;

struct Monomial {
    int64_t coef = 0;
    std::vector<std::string> syms;  // a product; empty for a constant
    bool operator==(const Monomial &) const = default;
};

struct SymPoly {
    std::vector<Monomial> terms;
    int64_t eval(const SymEnv &env) const;  // throws InternalError on an unbound symbol
    std::string str() const;                // "kernel_h - stride_h", "0"
    bool operator==(const SymPoly &) const = default;
};

enum class NeedKind { Replicated, Split };

// How one input is needed when the index variable is split.
struct InputNeed {
    NeedKind kind = NeedKind::Replicated;
    int dim = -1;             // Tessera dimension of the input, for Split
    SymPoly scale, lo_offset, hi_offset;
    SymPoly halo;             // overlap between neighbouring parts: hi_off - lo_off - scale + 1
    SymPoly divisor = SymPoly{{{1, {}}}};  // the region's bounds are divided by it (floor)
    bool operator==(const InputNeed &) const = default;
};

enum class OutKind { Split, Partial, Replicated };

struct OutputResult {
    OutKind kind = OutKind::Replicated;
    int dim = -1;             // for Split
    std::string reduce;       // for Partial: "sum", "max" or "min"
    bool operator==(const OutputResult &) const = default;
};

// A reduction inside the operator (batch norm's mean, softmax's sum) whose
// partial results must be combined across devices before the operator continues.
struct StageReduction {
    std::string stage;
    std::string reduce;
    SymPoly elements;         // size of the combined value, in elements
    int element_bytes = 4;    // 8 for a stage summed in double (batch norm's)
    bool operator==(const StageReduction &) const = default;
};

struct Strategy {
    std::string var;          // the split index variable: "m", "n", "k", ...
    bool reduction_var = false;
    std::vector<InputNeed> inputs;
    std::vector<OutputResult> outputs;
    std::vector<StageReduction> reductions;
    bool operator==(const Strategy &) const = default;
};

// The analysis result for one variant of an operator (its structural attributes).
struct OpStrategies {
    std::string variant;      // "matmul[transpose_a=0,transpose_b=0]"
    bool opaque = false;      // some index depends on data (gathers)
    std::vector<Strategy> strategies;
    // Index variables the analysis could not split, each with the reason.
    std::vector<std::pair<std::string, std::string>> rejected;
    // The stages the description marks as reductions that may cross devices
    // (Ctx::stage), in its order: the steps of the operator's staged kernels,
    // of which a strategy's `reductions` are the ones to combine.
    std::vector<std::string> stages;
};

using StructMap = std::map<std::string, int>;

// "op[k=v,...]" with keys sorted; the build tool and the runtime agree on it.
std::string variant_key(OpKind op, const StructMap &structural);

// The structural attributes that select the description variant for this call.
StructMap structural_attrs(const OpCall &call, const std::vector<TensorType> &inputs);

// The strategies of this call's variant; nullptr if that variant was not analysed
// (an unusual rank, say), in which case the operator can only be replicated. A
// reshape's come from reshape_strategies.
const OpStrategies *strategies_for(const OpCall &call, const std::vector<TensorType> &inputs);

// strategies_for's, with batch norm's statistics per device (PyTorch DDP's
// default, without SyncBatchNorm) when `local_batch_norm`: the batch split of
// batch_norm, batch_norm_grad and batch_norm_stats drops its stage reductions,
// so each block runs the operator whole on its own rows and statistics;
// batch_norm_grad's gamma and beta gradients become partial sums (each
// block's), combined as every weight gradient is; batch_norm_stats' running
// statistics are each device's own. Other operators and splits are
// unchanged. The tables are cached: pointers stay valid.
const OpStrategies *strategies_for(const OpCall &call, const std::vector<TensorType> &inputs,
                                   bool local_batch_norm);

// A reshape's strategies for these shapes: `analysed` (the table's, for the
// leading dimensions the two shapes share; may be null) and, for every group of
// dimensions the reshape merges or splits ([B, S, D] -> [B*S, D]: {B, S} and
// {B*S}), the split of the group's leading output dimension, which reads the
// rows of the group's leading input dimension that hold the same elements
// ([B*S] rows [lo, hi) read B rows [lo/S, (hi-1)/S]). A block is then a
// contiguous run of the input, so the kernel runs on it unchanged; where the
// parts' rows do not line up (k does not divide B) the partitioner sees the
// mismatch in the block shapes. Splitting any other dimension of a group
// selects elements that are not a box of the input, so it is not offered.
// The result lives as long as the process (cached per pair of shapes).
const OpStrategies *reshape_strategies(const OpStrategies *analysed, const Shape &in, const Shape &out);

// Every analysed variant, in table order.
const std::vector<OpStrategies> &all_strategies();

// The symbol values of a call: its scalar attributes and its input extents.
SymEnv symbol_env(const OpCall &call, const std::vector<TensorType> &inputs);

std::string strategy_str(const Strategy &s);  // one line, for tables and logs

// JSON text of the table, or of one entry (used by tessera-plan --ops).
std::string strategies_json(const std::vector<const OpStrategies *> &entries, int indent = 2);

}  // namespace tessera
