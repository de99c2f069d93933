// How this process was started: alone, or as one of the N processes that a
// launcher started (mpirun, prterun, srun, MPICH's mpiexec), which must then
// form one MPI job.
//
// Each launcher says so in its own environment variables, and only some of
// them say how many processes it started:
//
//   mpirun (Open MPI)         OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK
//   PMI-1/PMI-2 (MPICH's      PMI_SIZE, PMI_RANK
//     mpiexec, srun --mpi=pmi2)
//   PMIx (prterun,            PMIX_RANK only; under srun the count comes from
//     srun --mpi=pmix)          SLURM_STEP_NUM_TASKS (Slurm's PMIx namespace
//                               reads "slurm.pmix.<job>.<step>")
//   srun with no PMI          SLURM_STEP_NUM_TASKS, SLURM_PROCID
//
// The first of these that is present decides: mpirun started inside a Slurm
// allocation runs its daemons under srun, so its processes inherit SLURM_*
// variables that count daemons, not processes. SLURM_NTASKS alone is not
// enough: a batch script sees it too, and is one process.
//
// MPI starts whenever a launcher started more than one process, or did not say
// how many (PMIx outside Slurm). Once MPI has formed MPI_COMM_WORLD, its size
// must be the launcher's count: when it is 1, MPI found no launcher to join
// (srun without PMIx, a foreign MPI's launcher), and each process would train
// alone and write the same files.
#pragma once

#include <memory>
#include <string>

namespace tessera {

class Communicator;

struct Launch {
    std::string launcher;  // "mpirun (Open MPI)", "srun --mpi=pmix", ...; empty: started alone
    int size = 1;          // processes the launcher started; 0: it does not say
    std::string seen;      // the variables that said so: "PMIX_RANK=0, SLURM_STEP_NUM_TASKS=2"
    // Whether this process must start MPI to join the others.
    bool start_mpi() const { return size != 1; }
    bool operator==(const Launch &) const = default;
};

// Reads the environment (see the table above). Throws tessera::Error when a
// count or rank variable is present but not a number.
Launch detect_launch();

// Throws tessera::Error, naming the launcher, its variables and the fix, when
// MPI_COMM_WORLD (of `world_size` processes) is not the job that `launch`
// started. A launch that gives no count accepts any size.
void check_job_formed(const Launch &launch, int world_size);

// Starts MPI when `launch` says so (mpi_init, then make_mpi_communicator);
// the caller then checks the job (check_job_formed), knowing by then how many
// processes an error must end. Returns nullptr for a process started alone.
// Throws tessera::Error when this build has no MPI but the launcher started
// several processes.
std::unique_ptr<Communicator> join_job(const Launch &launch, int *argc, char ***argv);

}  // namespace tessera
