// Tofu's recursive partition search, and the baselines that share its cost model.
//
// For N devices the machine's levels are factored into cuts k1, k2, ... (outermost
// links first). Each cut is one exact minimisation (solver.h) over the layouts of
// the coarsened tensor groups: every operator contributes, for every combination
// of the layouts it touches, the cheapest of its strategies from lang/'s analysis,
// costed as the bytes its inputs, outputs and internal reductions move. The next
// cut then solves the same problem on each part's local shapes, so the total is
// c1 + k1*c2 + k1*k2*c3 + ... (Tofu section 5.3).
//
// A tensor is split at every level where some dimension divides evenly; the
// search may replicate only weights (and their gradients and optimizer state),
// which is how data parallelism falls inside the search space. A tensor with no
// evenly divisible dimension, or an operator with no strategy that divides, is
// replicated at that level and the plan's notes say why.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/partition/machine.h"
#include "tessera/partition/plan.h"
#include "tessera/partition/solver.h"

namespace tessera {

enum class PartitionStrategy : uint8_t {
    Tofu,          // the DP at every cut
    DataParallel,  // activations split along the batch, weights replicated
    Owt,           // "one weird trick": data parallel for convolutions, model
                   // parallel (weights split along their output) for matmuls
    EqualChop,     // the first cut's layouts reused at every level
    Brute,         // every assignment at every cut (small graphs only)
    Ddp,           // PyTorch DDP: `data` with batch norm's statistics per device
                   // (unless sync_batch_norm) and gradients in buckets
    Fsdp,          // FSDP FULL_SHARD (ZeRO-3): `ddp`'s operators, each weight, its
                   // gradient and optimizer state split 1/N, gathered before each use
};
const char *partition_strategy_name(PartitionStrategy s);
// Throws tessera::Error listing the valid names.
PartitionStrategy partition_strategy_from_name(const std::string &name);
std::vector<std::string> partition_strategy_names();

// How PartitionOptions::weights holds a weight at every cut.
enum class WeightLayout : uint8_t {
    Replicate,  // whole on every device (its gradient all-reduced)
    Split,      // split along one of its dimensions, never replicated
};
using WeightLayouts = std::vector<std::pair<std::string, WeightLayout>>;

struct PartitionOptions {
    PartitionStrategy strategy = PartitionStrategy::Tofu;
    std::string model;              // recorded in the plan
    bool coarsen = true;
    bool replicate_weights = true;  // whether the search may replicate weights
    std::vector<int> cuts;          // overrides machine_cuts (each k over the outermost link)
    int64_t brute_force_limit = int64_t{1} << 22;
    // Only strategies lowering can run (cost.h: no dropout blocks, no partial
    // maxima); tessera-train plans this way. The plan then also records each
    // rank's exact bytes per step (Plan::rank_comm_bytes).
    bool executable = false;
    // Whether executable plans may reduce inside an operator (run as staged
    // operators, tessera/lang/staged.h: synchronised batch norm, softmax over
    // split classes). On by default, so that what runs is what the search
    // finds; off keeps every such operator whole along its reduction, unless
    // forced (below). Summing a statistic in another order can flip a ReLU
    // whose input sits within rounding of zero (docs/lowering.md).
    bool staged_reductions = true;
    // Ddp and Fsdp: synchronise batch norm's statistics over the global
    // batch (SyncBatchNorm; Ddp is then `data`); by default each device
    // normalises by its own block's (Plan::local_batch_norm).
    bool sync_batch_norm = false;
    // Lowering fuses all-reduces into buckets of this many bytes (recorded in
    // Plan::bucket_bytes): 25 MiB, as PyTorch DDP's bucket_cap_mb; 0 turns
    // fusion off.
    int64_t bucket_bytes = kDefaultBucketBytes;
    static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;
    // Operators whose strategy is fixed at every cut: (name, index variable or
    // "replicate"). A name ending in '*' matches every operator it prefixes. So
    // that tests and users can run a path the search would not choose.
    std::vector<std::pair<std::string, std::string>> force;
    // Weights whose layout is fixed at every cut, by parameter name (a name
    // ending in '*' matches every parameter it prefixes); the fix holds for the
    // weight's gradient and optimizer state too, and the search chooses the
    // rest. The memory-aware choice (tessera-train --partition auto) sets it
    // per weight; --weights by hand. Replicate holds even without
    // replicate_weights.
    WeightLayouts weights;
    // Replaces the solver of every cut (tests use it to check the DP against
    // brute force on each cut of a recursion).
    CutSolver solver;
};

Plan partition(const Graph &g, const Machine &machine, const PartitionOptions &options = {});

// The bucket size to fuse with on devices of `device_bytes` (0: unlimited): a
// bucket's inputs and outputs are all resident while it runs, so it takes at
// most 1/16 of the device (and at least 1 byte, which fuses nothing).
int64_t bucket_bytes_within(int64_t bucket_bytes, int64_t device_bytes);

// Parses "NAME=VAR[,NAME=VAR...]" (tessera-plan and tessera-train --force);
// throws tessera::Error naming the bad entry.
std::vector<std::pair<std::string, std::string>> parse_force(const std::string &text);
// Parses "NAME=replicate|split[,...]" (--weights); throws tessera::Error
// naming the bad entry. format_weights writes what parse_weights reads.
WeightLayouts parse_weights(const std::string &text);
std::string format_weights(const WeightLayouts &weights);

}  // namespace tessera
