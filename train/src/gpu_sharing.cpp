#include "tessera/train/gpu_sharing.h"

#include <algorithm>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/tunables.h"

namespace tessera {

namespace {

std::string uuid_text(const GpuUuid &u) {
    std::string s;
    for (size_t i = 0; i < u.size(); i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        s += fmt::format("{:02x}", u[i]);
    }
    return s;
}

}  // namespace

std::vector<GpuUuid> gather_gpu_uuids(Communicator *comm, const GpuUuid &mine) {
    if (!comm || comm->size() == 1) return {mine};
    std::vector<GpuUuid> all(static_cast<size_t>(comm->size()));
    comm->all_gather(mine.data(), all.data(), sizeof(GpuUuid), comm->world_group());
    return all;
}

GpuSharing gpu_sharing(const std::vector<GpuUuid> &uuids, int rank) {
    TESSERA_INTERNAL_ASSERT(rank >= 0 && rank < static_cast<int>(uuids.size()), "gpu_sharing: rank ", rank, " of ",
                            uuids.size());
    const GpuUuid none{};
    GpuSharing s;
    s.every_rank_on_a_gpu = std::none_of(uuids.begin(), uuids.end(), [&](const GpuUuid &u) { return u == none; });
    if (uuids[rank] != none) s.ranks_on_my_gpu = static_cast<int>(std::count(uuids.begin(), uuids.end(), uuids[rank]));
    for (size_t a = 0; a < uuids.size() && s.shared.empty(); a++)
        for (size_t b = a + 1; b < uuids.size() && s.shared.empty(); b++)
            if (uuids[a] != none && uuids[a] == uuids[b])
                s.shared = fmt::format("ranks {} and {} share GPU {}", a, b, uuid_text(uuids[a]));
    return s;
}

bool nccl_shared_gpu_mode() {
    return env_choice("TESSERA_NCCL_SHARED_GPU", {"0", "1"}, "0", "value") == "1";
}

bool choose_nccl(CommChoice choice, bool sharded, bool nccl_built, const GpuSharing &gpus, bool shared_gpu_mode) {
    if (choice == CommChoice::Mpi) return false;
    const bool own_gpus = gpus.every_rank_on_a_gpu && (gpus.shared.empty() || shared_gpu_mode);
    if (choice == CommChoice::Auto) return sharded && nccl_built && own_gpus;
    TESSERA_CHECK(gpus.every_rank_on_a_gpu, "--comm nccl needs a CUDA device; ",
                  sharded ? "some ranks run on the cpu" : "this run is on the cpu", " (use --comm mpi)");
    TESSERA_CHECK(nccl_built, "--comm nccl: this build has no NCCL; use --comm mpi");
    TESSERA_CHECK(gpus.shared.empty() || shared_gpu_mode, "--comm nccl: ", gpus.shared,
                  ", and NCCL refuses two ranks on one GPU; give each rank its own GPU or use --comm mpi "
                  "(TESSERA_NCCL_SHARED_GPU=1 lets NCCL carry them anyway, slowly, for testing)");
    return sharded;
}

}  // namespace tessera
