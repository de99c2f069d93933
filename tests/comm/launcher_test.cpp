// Launcher detection over fake environments: each launcher's variables, the
// order in which they decide, the errors for malformed values, and the check
// that MPI formed the job the launcher started.
#include "tessera/comm/launcher.h"

#include <gtest/gtest.h>

#include "expect_error.h"
#include "scoped_env.h"
#include "tessera/comm/communicator.h"

namespace tessera {
namespace {

using test::expect_error;
using test::ScopedEnv;

// Every variable detect_launch() reads, unset for the scope of a test.
struct CleanEnv {
    ScopedEnv vars[10] = {{"OMPI_COMM_WORLD_SIZE", nullptr}, {"OMPI_COMM_WORLD_RANK", nullptr},
                          {"PMI_SIZE", nullptr},             {"PMI_RANK", nullptr},
                          {"PMIX_RANK", nullptr},            {"PMIX_NAMESPACE", nullptr},
                          {"SLURM_STEP_NUM_TASKS", nullptr}, {"SLURM_PROCID", nullptr},
                          {"SLURM_NTASKS", nullptr},         {"SLURM_STEP_ID", nullptr}};
};

TEST(comm_launcher, AloneWithoutLauncherVariables) {
    CleanEnv clean;
    EXPECT_EQ(detect_launch(), Launch{});
    EXPECT_FALSE(detect_launch().start_mpi());
    // A batch script sees the allocation's task count, but it is one process.
    ScopedEnv a("SLURM_NTASKS", "4"), b("SLURM_PROCID", "0");
    EXPECT_FALSE(detect_launch().start_mpi());
    EXPECT_EQ(join_job(detect_launch(), nullptr, nullptr), nullptr);
}

TEST(comm_launcher, Mpirun) {
    CleanEnv clean;
    ScopedEnv a("OMPI_COMM_WORLD_SIZE", "3"), b("OMPI_COMM_WORLD_RANK", "2");
    EXPECT_EQ(detect_launch(),
              (Launch{"mpirun (Open MPI)", 3, "OMPI_COMM_WORLD_SIZE=3, OMPI_COMM_WORLD_RANK=2"}));
    EXPECT_TRUE(detect_launch().start_mpi());
    // mpirun -np 1: one process, no MPI (as before).
    ScopedEnv c("OMPI_COMM_WORLD_SIZE", "1");
    EXPECT_FALSE(detect_launch().start_mpi());
}

TEST(comm_launcher, MpirunInsideSlurmIgnoresTheDaemonsStep) {
    CleanEnv clean;
    // mpirun's daemons run under srun, one per node: their step counts nodes.
    ScopedEnv a("OMPI_COMM_WORLD_SIZE", "8"), b("OMPI_COMM_WORLD_RANK", "5"), c("SLURM_STEP_NUM_TASKS", "2"),
        d("SLURM_PROCID", "1"), e("PMIX_RANK", "5");
    EXPECT_EQ(detect_launch().launcher, "mpirun (Open MPI)");
    EXPECT_EQ(detect_launch().size, 8);
}

TEST(comm_launcher, Pmi) {
    CleanEnv clean;
    ScopedEnv a("PMI_SIZE", "4"), b("PMI_RANK", "1");
    EXPECT_EQ(detect_launch(),
              (Launch{"a PMI launcher (MPICH's mpiexec, srun --mpi=pmi2)", 4, "PMI_SIZE=4, PMI_RANK=1"}));
    ScopedEnv c("PMI_SIZE", nullptr);
    EXPECT_EQ(detect_launch().size, 0);  // a rank without a count: start MPI and let it say
    EXPECT_TRUE(detect_launch().start_mpi());
}

TEST(comm_launcher, PmixGivesNoCountOutsideSlurm) {
    CleanEnv clean;
    ScopedEnv a("PMIX_RANK", "0"), b("PMIX_NAMESPACE", "1390411777");
    EXPECT_EQ(detect_launch(),
              (Launch{"a PMIx launcher (prterun, mpirun)", 0, "PMIX_RANK=0, PMIX_NAMESPACE=1390411777"}));
    EXPECT_TRUE(detect_launch().start_mpi());
    // prterun's daemons under srun: the step counts daemons, and the namespace is not Slurm's.
    ScopedEnv c("SLURM_STEP_NUM_TASKS", "2");
    EXPECT_EQ(detect_launch().size, 0);
}

TEST(comm_launcher, SrunWithPmix) {
    CleanEnv clean;
    ScopedEnv a("PMIX_RANK", "1"), b("PMIX_NAMESPACE", "slurm.pmix.77.0"), c("SLURM_STEP_NUM_TASKS", "2"),
        d("SLURM_PROCID", "1");
    EXPECT_EQ(detect_launch(), (Launch{"srun --mpi=pmix", 2,
                                       "PMIX_RANK=1, PMIX_NAMESPACE=slurm.pmix.77.0, SLURM_STEP_NUM_TASKS=2, "
                                       "SLURM_PROCID=1"}));
}

TEST(comm_launcher, SrunWithoutPmi) {
    CleanEnv clean;
    ScopedEnv a("SLURM_STEP_NUM_TASKS", "2"), b("SLURM_PROCID", "0");
    EXPECT_EQ(detect_launch(), (Launch{"srun", 2, "SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0"}));
    EXPECT_TRUE(detect_launch().start_mpi());
    ScopedEnv c("SLURM_STEP_NUM_TASKS", "1");
    EXPECT_FALSE(detect_launch().start_mpi());
}

TEST(comm_launcher, MalformedVariablesAreErrors) {
    CleanEnv clean;
    {
        ScopedEnv a("OMPI_COMM_WORLD_SIZE", "0");
        expect_error([] { detect_launch(); },
                     "environment variable OMPI_COMM_WORLD_SIZE='0' is not an integer >= 1; launchers (mpirun, srun) "
                     "set it, so start the job with one or unset it");
    }
    {
        ScopedEnv a("OMPI_COMM_WORLD_SIZE", "2"), b("OMPI_COMM_WORLD_RANK", "x1");
        expect_error([] { detect_launch(); }, "environment variable OMPI_COMM_WORLD_RANK='x1' is not an integer >= 0");
    }
    {
        ScopedEnv a("PMI_RANK", "-1");
        expect_error([] { detect_launch(); }, "environment variable PMI_RANK='-1' is not an integer >= 0");
    }
    {
        ScopedEnv a("PMIX_RANK", "");
        expect_error([] { detect_launch(); }, "environment variable PMIX_RANK='' is not an integer >= 0");
    }
    {
        ScopedEnv a("SLURM_STEP_NUM_TASKS", "two");
        expect_error([] { detect_launch(); }, "environment variable SLURM_STEP_NUM_TASKS='two' is not an integer >= 1");
    }
}

TEST(comm_launcher, JobMustBeTheLaunchersJob) {
    const Launch srun{"srun", 2, "SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0"};
    check_job_formed(srun, 2);
    expect_error([&] { check_job_formed(srun, 1); },
                 "srun started 2 processes (SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0), but MPI put this one in a job of "
                 "1: each process would train alone and all would write the same files. MPI forms one job only "
                 "through the launcher's process-management interface: under Slurm use `srun --mpi=pmix`");
    expect_error([&] { check_job_formed(srun, 3); }, "but MPI put this one in a job of 3. MPI forms one job only");
    // A launcher that gives no count accepts what MPI formed.
    check_job_formed(Launch{"a PMIx launcher (prterun, mpirun)", 0, "PMIX_RANK=0"}, 1);
    check_job_formed(Launch{"a PMIx launcher (prterun, mpirun)", 0, "PMIX_RANK=0"}, 5);
}

TEST(comm_launcher, SeveralProcessesNeedMpi) {
    if (mpi_available()) GTEST_SKIP() << "this build has MPI; tests/mpi/launcher_test.sh runs the MPI side";
    CleanEnv clean;
    ScopedEnv a("SLURM_STEP_NUM_TASKS", "2"), b("SLURM_PROCID", "0");
    expect_error([] { join_job(detect_launch(), nullptr, nullptr); },
                 "srun started 2 processes (SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0), but this build of Tessera has no "
                 "MPI, so each would train alone; configure with -DTESSERA_MPI=ON, or run one process");
}

}  // namespace
}  // namespace tessera
