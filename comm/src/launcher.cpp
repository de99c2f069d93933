// Launcher detection (launcher.h has the table of variables and the order).
#include "tessera/comm/launcher.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>

#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/tunables.h"

namespace tessera {
namespace {

// `name` parsed as an integer >= `min`; nothing when unset. A launcher's
// variable that is not a number means a broken environment, not "alone".
std::optional<int> launcher_int(const char *name, int min) {
    return env_int(name, min, "launchers (mpirun, srun) set it, so start the job with one or unset it");
}

bool env_set(const char *name) { return env_text(name).has_value(); }

// "A=1, B=2" for those of `names` that are set.
std::string seen(std::initializer_list<const char *> names) {
    std::string s;
    for (const char *name : names) {
        const std::optional<std::string> value = env_text(name);
        if (!value) continue;
        if (!s.empty()) s += ", ";
        s += std::string(name) + "=" + *value;
    }
    return s;
}

bool slurm_namespace() {
    return env_text("PMIX_NAMESPACE").value_or("").starts_with("slurm.pmix.");
}

}  // namespace

Launch detect_launch() {
    Launch l;
    if (std::optional<int> size = launcher_int("OMPI_COMM_WORLD_SIZE", 1)) {
        launcher_int("OMPI_COMM_WORLD_RANK", 0);
        l.launcher = "mpirun (Open MPI)";
        l.size = *size;
        l.seen = seen({"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"});
        return l;
    }
    if (env_set("PMI_SIZE") || env_set("PMI_RANK")) {
        launcher_int("PMI_RANK", 0);
        l.launcher = "a PMI launcher (MPICH's mpiexec, srun --mpi=pmi2)";
        l.size = launcher_int("PMI_SIZE", 1).value_or(0);
        l.seen = seen({"PMI_SIZE", "PMI_RANK"});
        return l;
    }
    const std::optional<int> tasks = launcher_int("SLURM_STEP_NUM_TASKS", 1);
    if (env_set("PMIX_RANK")) {
        launcher_int("PMIX_RANK", 0);
        const bool slurm = tasks && slurm_namespace();
        l.launcher = slurm ? "srun --mpi=pmix" : "a PMIx launcher (prterun, mpirun)";
        l.size = slurm ? *tasks : 0;
        l.seen = seen({"PMIX_RANK", "PMIX_NAMESPACE", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"});
        return l;
    }
    if (tasks) {
        launcher_int("SLURM_PROCID", 0);
        l.launcher = "srun";
        l.size = *tasks;
        l.seen = seen({"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"});
    }
    return l;
}

void check_job_formed(const Launch &launch, int world_size) {
    if (launch.size == 0 || launch.size == world_size) return;
    fail(launch.launcher, " started ", launch.size, " processes (", launch.seen, "), but MPI put this one in a job of ",
         world_size, world_size == 1 ? ": each process would train alone and all would write the same files" : "",
         ". MPI forms one job only through the launcher's process-management interface: under Slurm use "
         "`srun --mpi=pmix` (`srun --mpi=list` shows what the cluster offers), or start the job with the mpirun of "
         "the MPI library Tessera was built with (tessera-train --env names it)");
}

std::unique_ptr<Communicator> join_job(const Launch &launch, int *argc, char ***argv) {
    if (!launch.start_mpi()) return nullptr;
    const std::string count = launch.size == 0 ? "several" : std::to_string(launch.size);
    TESSERA_CHECK(mpi_available(), launch.launcher, " started ", count, " processes (", launch.seen,
                  "), but this build of Tessera has no MPI, so each would train alone; configure with "
                  "-DTESSERA_MPI=ON, or run one process");
    mpi_init(argc, argv);
    return make_mpi_communicator();
}

}  // namespace tessera
