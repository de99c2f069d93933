#include "tessera/train/job.h"

#include "tessera/comm/communicator.h"
#include "tessera/exec/device_choice.h"

namespace tessera {

Job job_of(Communicator *comm) {
    Job j;
    j.comm = comm;
    if (!comm) {
        j.local_rank = local_rank_from_env(0);
        j.local_ranks = local_size_from_env(1);
        return j;
    }
    j.rank = comm->rank();
    j.ranks = comm->size();
    j.local_rank = comm->local_rank();
    j.local_ranks = comm->local_size();
    return j;
}

}  // namespace tessera
