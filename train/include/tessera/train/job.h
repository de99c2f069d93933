// The job this process is one rank of, passed to what needs it (as Megatron's
// parallel state is): its rank among the job's ranks, its place on its host,
// and the communicator that joins them. A process started alone is a job of
// one rank with no communicator. Options (train_options.h) say what to run;
// the Job says who runs it.
#pragma once

namespace tessera {

class Communicator;

struct Job {
    Communicator *comm = nullptr;  // the world; nullptr when alone
    int rank = 0, ranks = 1;
    int local_rank = 0, local_ranks = 1;  // among the ranks on this host
    bool sharded() const { return ranks > 1; }
    bool root() const { return rank == 0; }  // reports and writes files
};

// The job `comm` joins; nullptr: a process alone, whose place on its host
// comes from the launcher's environment, if at all (exec/device_choice.h).
Job job_of(Communicator *comm);

}  // namespace tessera
