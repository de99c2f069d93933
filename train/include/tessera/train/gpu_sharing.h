// Which ranks share a GPU, decided from the GPU each rank really uses (its
// UUID, gathered over the job), not from local ranks and device counts: an
// explicit --device cuda:N, CUDA_VISIBLE_DEVICES and one GPU per rank all
// come out right. It decides how many ranks draw on one GPU's free memory
// (the default budget) and whether NCCL can carry the collectives (NCCL
// refuses two ranks on one GPU).
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/exec/cuda_uuid.h"
#include "tessera/train/train_options.h"

namespace tessera {

struct GpuSharing {
    bool every_rank_on_a_gpu = false;  // no rank runs on the cpu
    int ranks_on_my_gpu = 1;           // this rank included
    // When two ranks share a GPU: "ranks 0 and 2 share GPU 3f2a91c0-...", else "".
    std::string shared;
};

// Every rank's UUID in rank order (a zero UUID: a rank on the cpu). One
// all-gather over the world, which every rank must call; `comm` null or of
// one rank gives `mine` alone.
std::vector<GpuUuid> gather_gpu_uuids(Communicator *comm, const GpuUuid &mine);

GpuSharing gpu_sharing(const std::vector<GpuUuid> &uuids, int rank);

// The testing mode that lets NCCL carry ranks sharing one GPU
// (TESSERA_NCCL_SHARED_GPU=1; see nccl_hosts_per_rank in communicator.h).
// Unset or 0: off. Throws for any other value, naming it.
bool nccl_shared_gpu_mode();

// --comm: whether the collectives of a sharded run on CUDA go through NCCL.
// auto: when NCCL is built and every rank has a GPU of its own, or shares one
// under `shared_gpu_mode`. nccl: the same, or an error saying why not.
bool choose_nccl(CommChoice choice, bool sharded, bool nccl_built, const GpuSharing &gpus,
                 bool shared_gpu_mode = false);

}  // namespace tessera
