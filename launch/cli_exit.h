// How the planning programs (tessera-plan, tessera-bench) end: what a run
// throws becomes a message on stderr and an exit code. tessera-train ends
// through its own path (train_loop.h), which also has MPI to stop.
#pragma once

#include <functional>
#include <string>

namespace tessera {

// A combination of flags that does not go together: exit code 2.
struct UsageError {
    std::string message;
};

// Runs `body`: 0 when it returns; 2 for a UsageError (with a pointer to
// --help); 1 for a tessera::Error or running out of memory; 3 for an
// internal error (a bug). Messages start with `program`.
int exit_code_of(const char *program, const std::function<void()> &body);

}  // namespace tessera
