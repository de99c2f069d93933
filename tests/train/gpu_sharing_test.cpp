// Which ranks share a GPU (train/gpu_sharing.h), from made-up UUIDs as a
// job's all-gather would give them, and --comm's choice of NCCL from that:
// one GPU per rank whatever the device numbering, an explicit --device cuda:N
// on every rank, a rank on the cpu.
#include "tessera/train/gpu_sharing.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "expect_error.h"

namespace tessera {
namespace {

using test::error_of;

GpuUuid gpu(uint8_t n) {
    GpuUuid u{};
    u[0] = 0xa0;
    u[15] = n;
    return u;
}

TEST(GpuSharing, OwnGpusWhateverTheirIndex) {
    // Under CUDA_VISIBLE_DEVICES every rank may see its GPU as device 0: the
    // UUIDs still differ.
    const GpuSharing s = gpu_sharing({gpu(1), gpu(2), gpu(3), gpu(4)}, 2);
    EXPECT_TRUE(s.every_rank_on_a_gpu);
    EXPECT_EQ(s.ranks_on_my_gpu, 1);
    EXPECT_EQ(s.shared, "");
    EXPECT_TRUE(choose_nccl(CommChoice::Auto, true, true, s));
    EXPECT_TRUE(choose_nccl(CommChoice::Nccl, true, true, s));
    EXPECT_FALSE(choose_nccl(CommChoice::Mpi, true, true, s));
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, true, false, s));  // no NCCL in this build
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, false, true, s));  // one process: nothing to carry
}

TEST(GpuSharing, TwoRanksOnOneGpu) {
    // --device cuda:0 on two ranks of a host with two GPUs: the same UUID.
    const GpuSharing s = gpu_sharing({gpu(7), gpu(7), gpu(8)}, 1);
    EXPECT_EQ(s.ranks_on_my_gpu, 2);
    EXPECT_EQ(gpu_sharing({gpu(7), gpu(7), gpu(8)}, 2).ranks_on_my_gpu, 1);
    EXPECT_EQ(s.shared, "ranks 0 and 1 share GPU a0000000-0000-0000-0000-000000000007");
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, true, true, s));
    EXPECT_EQ(error_of([&] { choose_nccl(CommChoice::Nccl, true, true, s); }),
              "--comm nccl: ranks 0 and 1 share GPU a0000000-0000-0000-0000-000000000007, and NCCL refuses two ranks "
              "on one GPU; give each rank its own GPU or use --comm mpi (TESSERA_NCCL_SHARED_GPU=1 lets NCCL carry "
              "them anyway, slowly, for testing)");
    // The testing mode lets NCCL carry them, asked for or by auto; mpi stays mpi.
    EXPECT_TRUE(choose_nccl(CommChoice::Auto, true, true, s, true));
    EXPECT_TRUE(choose_nccl(CommChoice::Nccl, true, true, s, true));
    EXPECT_FALSE(choose_nccl(CommChoice::Mpi, true, true, s, true));
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, true, false, s, true));  // still needs NCCL in the build
}

TEST(GpuSharing, SharedGpuModeIsReadFromTheEnvironment) {
    ::unsetenv("TESSERA_NCCL_SHARED_GPU");
    EXPECT_FALSE(nccl_shared_gpu_mode());
    ::setenv("TESSERA_NCCL_SHARED_GPU", "1", 1);
    EXPECT_TRUE(nccl_shared_gpu_mode());
    ::setenv("TESSERA_NCCL_SHARED_GPU", "0", 1);
    EXPECT_FALSE(nccl_shared_gpu_mode());
    ::setenv("TESSERA_NCCL_SHARED_GPU", "yes", 1);
    EXPECT_EQ(error_of([] { nccl_shared_gpu_mode(); }),
              "TESSERA_NCCL_SHARED_GPU: unknown value 'yes'; valid: 0, 1");
    ::unsetenv("TESSERA_NCCL_SHARED_GPU");
}

TEST(GpuSharing, RanksOnTheCpu) {
    const GpuSharing cpu = gpu_sharing({GpuUuid{}, GpuUuid{}}, 0);
    EXPECT_FALSE(cpu.every_rank_on_a_gpu);
    EXPECT_EQ(cpu.ranks_on_my_gpu, 1);
    EXPECT_EQ(cpu.shared, "");  // two cpu ranks share no GPU
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, true, true, cpu));
    EXPECT_EQ(error_of([&] { choose_nccl(CommChoice::Nccl, true, true, cpu); }),
              "--comm nccl needs a CUDA device; some ranks run on the cpu (use --comm mpi)");
    EXPECT_EQ(error_of([] { choose_nccl(CommChoice::Nccl, false, true, gpu_sharing({GpuUuid{}}, 0)); }),
              "--comm nccl needs a CUDA device; this run is on the cpu (use --comm mpi)");
    EXPECT_FALSE(choose_nccl(CommChoice::Auto, true, true, gpu_sharing({gpu(1), GpuUuid{}}, 0)));
    EXPECT_EQ(error_of([] { choose_nccl(CommChoice::Nccl, true, false, gpu_sharing({gpu(1), gpu(2)}, 0)); }),
              "--comm nccl: this build has no NCCL; use --comm mpi");
    EXPECT_EQ(error_of([] { comm_choice_from_name("gloo"); }),
              "--comm: unknown communicator 'gloo'; valid: auto, mpi, nccl");
    EXPECT_EQ(comm_choice_from_name("nccl"), CommChoice::Nccl);
}

TEST(GpuSharing, OneProcessGathersItsOwn) {
    EXPECT_EQ(gather_gpu_uuids(nullptr, gpu(5)), std::vector<GpuUuid>{gpu(5)});
}

}  // namespace
}  // namespace tessera
