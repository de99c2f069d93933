#include "tessera/pipeline/partition_flags.h"

#include <cmath>

namespace tessera {

void PartitionFlags::apply(PartitionOptions &o) const {
    if (!force.empty()) o.force = parse_force(force);
    if (!weights.empty()) o.weights = parse_weights(weights);
    o.staged_reductions = !no_staged_reductions;
    o.replicate_weights = !no_replicate_weights;
    o.bucket_bytes = std::llround(bucket_mb * double(int64_t{1} << 20));
    o.sync_batch_norm = sync_batch_norm;
}

}  // namespace tessera
