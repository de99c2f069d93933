#include "environment.h"

#include <sstream>
#include <thread>

#include <unistd.h>

#include "tessera/comm/communicator.h"
#include "tessera/comm/launcher.h"
#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/thread_budget.h"
#include "tessera/lang/cpu_runtime.h"
#include "tessera/text.h"
#include "tessera_version.h"  // generated from version.h.in

namespace tessera {
namespace {

std::string or_not_built(const std::string &version, const char *option) {
    return version.empty() ? std::string("not in this build (") + option + ")" : version;
}

// "2: cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB), cuda:1 ...", or why none.
std::string gpus() {
    const int n = cuda_device_count();
    if (n == 0) return "none (" + cuda_unavailable_reason() + ")";
    std::string s = std::to_string(n) + ":";
    for (int i = 0; i < n; i++) {
        s += i == 0 ? " " : ", ";
        try {
            CudaDeviceInfo d = cuda_device_info(i);
            s += detail::concat("cuda:", i, " ", d.name, " (sm_", d.major, d.minor, ", ", format_bytes(d.total_bytes),
                                ")");
        } catch (const Error &e) {
            s += detail::concat("cuda:", i, " unusable (", e.what(), ")");
        }
    }
    return s;
}

std::string launcher() {
    try {
        const Launch l = detect_launch();
        if (l.launcher.empty()) return "none (this process runs alone)";
        return detail::concat(l.launcher, ", ", l.size == 0 ? "an unsaid number of" : std::to_string(l.size),
                              " processes (", l.seen, ")");
    } catch (const Error &e) {
        return e.what();
    }
}

// The CPUs, and the thread budget of a process alone (a job's ranks share theirs).
std::string cpus_and_threads(int flag) {
    const ThreadRequest r = thread_request(flag, nullptr);
    const std::string s = detail::concat("cpus: ", std::thread::hardware_concurrency(), " online, ", r.cpus,
                                         " in this process's affinity mask\n");
    try {
        return s + plan_thread_budget(r).summary() + " for a process alone";
    } catch (const Error &e) {
        return s + "threads: " + e.what();
    }
}

}  // namespace

std::string version_line(const std::string &program) {
    return program + " " TESSERA_VERSION " (git " TESSERA_GIT_DESCRIBE ")";
}

std::string environment_report(int threads_flag) {
    std::ostringstream os;
    os << "tessera: " TESSERA_VERSION " (git " TESSERA_GIT_DESCRIBE " when configured, " TESSERA_BUILD_TYPE " build)\n";
    os << "compiler: " TESSERA_CXX_COMPILER << (*TESSERA_CUDA_COMPILER ? "; CUDA: " TESSERA_CUDA_COMPILER : "") << "\n";
    os << "halide: " TESSERA_HALIDE_VERSION "; CPU kernels for " << halide_kernel_target()
       << " (the first this CPU runs of TESSERA_HALIDE_TARGET=" TESSERA_HALIDE_TARGET_SETTING ")\n";
    os << "openblas: " << openblas_config() << "\n";
    os << "mpi: " << or_not_built(mpi_library_version(), "TESSERA_MPI=OFF") << "\n";
    os << "cuda: " << or_not_built(cuda_versions(), "no CUDA toolkit found, or TESSERA_CUDA=OFF") << "\n";
    os << "nccl: " << or_not_built(nccl_version(), "needs CUDA and NCCL at configure time") << "\n";
    os << "cudnn: " << or_not_built(cudnn_version(), "needs CUDA and cuDNN at configure time; convolutions run the hand kernels")
       << "\n";
    os << "gpus: " << gpus() << "\n";
    os << cpus_and_threads(threads_flag) << "\n";
    os << "launcher: " << launcher() << "\n";
    return os.str();
}

}  // namespace tessera
