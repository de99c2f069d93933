#include "tessera/exec/device_choice.h"

#include <cstdlib>
#include <initializer_list>

#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/text.h"
#include "tessera/tunables.h"

namespace tessera {

namespace {

bool parse_index(const std::string &s, int *out) {
    if (s.empty() || s.size() > 4) return false;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
}

// The first of `names` that is set, as a rank or a count (a launcher's
// variable that is not one means a broken environment: an error naming it).
int int_from_env(std::initializer_list<const char *> names, int fallback) {
    for (const char *name : names)
        if (std::optional<int> v = env_int(name, 0, "launchers (mpirun, srun) set it, so start the job with one or "
                                                     "unset it"))
            return *v;
    return fallback;
}

}  // namespace

DeviceChoice choose_device(const std::string &flag, int local_rank) {
    DeviceChoice c;
    if (flag == "cpu") {
        c.why = "as asked";
        return c;
    }
    const int count = cuda_device_count();
    if (flag == "auto") {
        if (count == 0) {
            c.why = "the default with no GPU: " + cuda_unavailable_reason();
            return c;
        }
        c.cuda = true;
        c.index = local_rank % count;
        c.why = "the default with a GPU present";
        return c;
    }
    int index = -1;
    const bool cuda = flag == "cuda" || (flag.rfind("cuda:", 0) == 0 && parse_index(flag.substr(5), &index));
    TESSERA_CHECK(cuda, "--device: unknown device '", flag, "'; valid: auto, cpu, cuda, cuda:N");
    TESSERA_CHECK(count > 0, "--device ", flag, ": no CUDA device is usable (", cuda_unavailable_reason(),
                  "); use --device cpu");
    TESSERA_CHECK(index < count, "--device ", flag, ": this machine has ", count, " CUDA device",
                  count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
    c.cuda = true;
    c.index = index >= 0 ? index : local_rank % count;
    c.why = "as asked";
    return c;
}

std::string device_description(const DeviceChoice &c) {
    if (!c.cuda) return "cpu";
    CudaDeviceInfo info = cuda_device_info(c.index);
    return detail::concat("cuda:", c.index, " (", info.name, ", sm_", info.major, info.minor, ", ",
                          format_bytes(info.free_bytes), " free)");
}

std::unique_ptr<Device> make_device(const DeviceChoice &c, int64_t arena_bytes) {
    if (c.cuda) return make_cuda_device(c.index, arena_bytes);
    return std::make_unique<CpuDevice>(arena_bytes);
}

int local_rank_from_env(int fallback) {
    return int_from_env({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, fallback);
}

int local_size_from_env(int fallback) {
    return int_from_env({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, fallback);
}


}  // namespace tessera
