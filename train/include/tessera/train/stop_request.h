// A graceful stop. SIGTERM (what Slurm sends before it kills a job, or a user's
// `kill`) and SIGINT (Ctrl-C) only record the signal; the training loop sees it
// at the next step boundary, where every rank agrees on it (one small
// all-gather a step), writes a checkpoint and ends the run with exit code
// 128 + the signal, so that a preempted job resumes where it stopped
// (--resume). A second signal ends the process at once, as the default would.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

class Communicator;

// Installs the handlers for SIGTERM and SIGINT (once per process).
void install_stop_handlers();

// The first stop signal this process received, or 0.
int stop_signal();

// The stop signal any rank received (the largest number), or 0: a collective
// over the world's ranks with `comm`, which may be null for a single process.
int agreed_stop_signal(Communicator *comm);

// What the training loop throws when it stops on a signal.
struct StopRequested {
    int signal = 0;
    int64_t step = 0;        // the steps done, all checkpointed
    int64_t total = 0;       // the steps the run was to do
    std::string checkpoint;  // the checkpoint written, or "" without --checkpoint
    // "stopped by SIGTERM after step 12 of 300; checkpoint DIR/checkpoint.safetensors (continue with --resume)"
    std::string message() const;
};

}  // namespace tessera
