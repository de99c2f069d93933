// The ranks of a job must run one thing. Each rank of an MPMD launch
// (`mpirun -np 1 A : -np 1 B`), or of a launch whose hosts hold different
// machine files, could otherwise start different models and then meet in
// collectives of different sizes, which MPI does not survive (a segfault
// inside OpenMPI, or a hang).
//
// So before any other exchange the ranks agree on a fingerprint of what they
// were asked to run: first a 64-bit hash of their description, an exchange
// of the same fixed size on every rank whatever it holds; only when the
// hashes differ, a second fixed-size exchange of the descriptions themselves
// (cut to kDescriptionBytes), from which every rank builds the same message
// naming the first line that differs and the ranks that differ on it.
#pragma once

#include <string>
#include <vector>

#include "tessera/partition/plan.h"
#include "tessera/train/train_options.h"

namespace tessera {

class Communicator;

// The first bytes of a description exchanged when the hashes differ.
inline constexpr size_t kDescriptionBytes = 2048;

// The options that decide what a rank computes and exchanges, one
// "--flag value" line each (the model by its canonical spec). Left out are
// those a rank may set on its own: --device, --threads, --progress,
// --log-every, --metrics (only rank 0 writes them) and --comm-timeout.
std::vector<std::string> run_arguments(const TrainOptions &o);

// What a partitioned run's ranks must share of its plan: the machine
// planned on, the cuts, and a hash of the whole plan (but its search time
// and the model spec as spelled).
std::vector<std::string> plan_identity(const Plan &plan);

// Collective over the world: returns when every rank passed the same
// `lines`; otherwise throws, on every rank, tessera::Error "the ranks
// disagree on their WHAT: rank 0 has 'LINE' but rank R has 'LINE'; ADVICE".
void agree_across_ranks(Communicator &comm, const std::string &what, const std::vector<std::string> &lines,
                        const std::string &advice);

}  // namespace tessera
