// --device: how a run picks its device, and the errors for what cannot work.
// Runs everywhere; on a machine with a GPU the cuda cases pick it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/device_choice.h"

namespace tessera {
namespace {

std::string error_of(const std::string &flag) {
    try {
        choose_device(flag, 0);
    } catch (const Error &e) {
        return e.what();
    }
    return "<no error>";
}

TEST(DeviceChoice, CpuIsAlwaysThere) {
    DeviceChoice c = choose_device("cpu", 3);
    EXPECT_FALSE(c.cuda);
    EXPECT_EQ(device_description(c), "cpu");
    auto dev = make_device(c, 4096);
    EXPECT_EQ(dev->name(), "cpu");
    EXPECT_EQ(dev->arena_bytes(), 4096);
}

TEST(DeviceChoice, AutoPicksCudaExactlyWhenAGpuIsPresent) {
    const int n = cuda_device_count();
    for (int rank : {0, 1, 5}) {
        DeviceChoice c = choose_device("auto", rank);
        EXPECT_EQ(c.cuda, n > 0);
        if (n > 0) EXPECT_EQ(c.index, rank % n);  // ranks spread over the GPUs, sharing them when more
        else EXPECT_NE(c.why.find(cuda_unavailable_reason()), std::string::npos) << c.why;
    }
}

TEST(DeviceChoice, UnknownNamesAreErrors) {
    for (const char *bad : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda0", ""})
        EXPECT_EQ(error_of(bad), std::string("--device: unknown device '") + bad + "'; valid: auto, cpu, cuda, cuda:N")
            << bad;
}

TEST(DeviceChoice, CudaWithoutAGpuSaysWhyAndWhatWorks) {
    if (cuda_device_count() > 0) {
        const int n = cuda_device_count();
        EXPECT_NE(error_of("cuda:" + std::to_string(n)).find("this machine has"), std::string::npos);
        return;
    }
    EXPECT_EQ(error_of("cuda"), "--device cuda: no CUDA device is usable (" + cuda_unavailable_reason() +
                                    "); use --device cpu");
    EXPECT_EQ(error_of("cuda:1"), "--device cuda:1: no CUDA device is usable (" + cuda_unavailable_reason() +
                                      "); use --device cpu");
    try {
        make_cuda_device(0, 1 << 20);
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    }
}

TEST(DeviceChoice, LocalRankComesFromTheLauncher) {
    unsetenv("MPI_LOCALRANKID");
    unsetenv("SLURM_LOCALID");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    EXPECT_EQ(local_rank_from_env(9), 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "junk", 1);
    EXPECT_EQ(test::error_of([] { local_rank_from_env(9); }),
              "environment variable OMPI_COMM_WORLD_LOCAL_RANK='junk' is not an integer >= 0; launchers (mpirun, "
              "srun) set it, so start the job with one or unset it");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    EXPECT_EQ(local_rank_from_env(2), 2);
}

}  // namespace
}  // namespace tessera
