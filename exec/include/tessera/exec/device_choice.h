// Which device a run uses: the --device flag of the programs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/exec/device.h"

namespace tessera {

struct DeviceChoice {
    bool cuda = false;
    int index = 0;       // the CUDA device
    std::string why;     // how it was chosen, for the first line of output
};

// Resolves a --device value: "auto" (cuda when a GPU is present, cpu
// otherwise), "cpu", "cuda" or "cuda:N". Without an index, rank `local_rank`
// of this host takes GPU local_rank mod count, so that ranks spread over the
// GPUs and share them when there are more ranks than GPUs. Throws
// tessera::Error for an unknown value and for cuda when no GPU is usable.
DeviceChoice choose_device(const std::string &flag, int local_rank);

// "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB free)" or "cpu".
std::string device_description(const DeviceChoice &choice);

// The device, with an arena of exactly `arena_bytes`.
std::unique_ptr<Device> make_device(const DeviceChoice &choice, int64_t arena_bytes);

// This process's rank among the ranks on its host, from the launcher's
// environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID);
// `fallback` when none is set. Only for a process without an MPI
// communicator: a job's ranks ask theirs (Communicator::local_rank(), which
// MPI answers from which ranks share memory, whatever the launcher set).
int local_rank_from_env(int fallback);
// How many ranks run on this host (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE); `fallback` when none is set.
int local_size_from_env(int fallback);

}  // namespace tessera
