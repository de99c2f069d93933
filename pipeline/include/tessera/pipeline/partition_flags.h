// The partition options as the command line gives them (--force, --weights,
// --no-staged-reductions, --no-replicate-weights, --bucket-mb,
// --sync-batch-norm), held in textual form until a plan is made so that a run
// can carry them, compare them across ranks and name them in errors.
// tessera-plan and tessera-train register them in one place
// (launch/shared_flags.h).
#pragma once

#include <string>

#include "tessera/partition/partition.h"

namespace tessera {

struct PartitionFlags {
    std::string force;               // PartitionOptions::force, as parse_force() reads it
    std::string weights;             // PartitionOptions::weights, as parse_weights() reads it
    bool no_staged_reductions = false;  // !PartitionOptions::staged_reductions
    bool no_replicate_weights = false;
    double bucket_mb = 25;  // PartitionOptions::bucket_bytes, in MiB
    bool sync_batch_norm = false;
    // Sets force and weights (parsed: throws tessera::Error naming a malformed entry),
    // staged_reductions, replicate_weights, bucket_bytes and sync_batch_norm.
    void apply(PartitionOptions &o) const;
};

}  // namespace tessera
