// The whole-step simulator: one training step of every rank of a job,
// predicted from each rank's lowered, swap-planned program.
//
//   std::vector<RankProgram> ranks = {{&g0, &p0, times0}, {&g1, &p1, times1}};
//   StepPrediction step = simulate_step(ranks, {.machine = cluster_machine(2, 8), ...});
//   step.step_s, step.ranks[r].exposed_comm_s, step.throughput
//
// Each rank's five streams (program/stream.h) run their instructions in list order, as the
// executor does: an instruction starts when its stream's previous one has
// ended and, for an event wait, when the latest record of that event before it
// in the list has happened. An event record takes only the per-instruction
// overhead (every instruction but a wait pays it); a compute instruction
// takes its node's time; a swap, its bytes over the host link's
// bandwidth in its direction; a collective, the alpha-beta time below. All
// ranks are simulated together, event by event, because a collective couples
// them: it starts nowhere before its last member has reached it.
//
// Collectives, per communication node (graph/comm_attrs.h), over a machine of
// link levels (partition/machine.h; ranks numbered with the outermost level
// most significant):
//   all-reduce over k ranks      2(k-1) latency + bytes / bandwidth
//   reduce-scatter over k ranks  (k-1) latency + bytes / bandwidth
// where latency and bandwidth are those of the outermost level on which two
// members differ (the slowest link the ring crosses) and bytes the most any
// member sends ("bytes": what lowering counts, equal to the communicator's ring
// algorithm). Members start when the last arrives and finish together.
//   redistribute                 pairwise rounds, as exec/src/collective.cpp
// runs them: in round s rank r sends to r+s and receives from r-s (both at
// once, skipping a round with neither). A transfer starts when both its ends
// have reached that round and takes latency + bytes / bandwidth of the level
// between the two ranks; a rank's round ends with the later of its send and
// its receive. So members may finish a redistribute at different times.
//
// Measured transfers (RankProgram::transfer_s, from a real step): a swap takes
// its measured time rather than bytes over bandwidth; a collective every
// member timed takes, from its last member's arrival, the least time a member
// measured, in place of the model above.
//
// With StepSimOptions::cores_per_rank, a rank's instructions share its cores
// (processor sharing), solved as a fixed point: every compute and swap
// instruction is stretched by the sharing its last simulated span saw, and the
// step simulated again, until no stretch moves by more than 0.001%.
//
// Not modelled: bandwidth shared by transfers that run at once (two ranks'
// rounds on one link, a swap beside a collective on one PCIe link), compute
// slowed by communication on a GPU, the local copies of a redistribute, the
// chunking of device collectives through the comm workspace, and NCCL's tree
// algorithms. Collectives of one rank never overlap each other, because they
// share its one comm stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/partition/machine.h"
#include "tessera/program/program.h"

namespace tessera {

// One rank's input. The pointers must outlive the call.
struct RankProgram {
    const Graph *graph = nullptr;      // the rank's lowered graph
    const Program *program = nullptr;  // what the rank runs in one step
    std::vector<double> node_s;        // seconds per NodeId of *graph (a compute instruction's time)
    // Per instruction of *program, or empty: seconds an event wait takes past
    // its record and its stream's arrival (a measured thread hand-off,
    // Executor::handoff_times); 0 for every other instruction.
    std::vector<double> wait_s = {};
    // Seconds per NodeId for the operators the program runs on the host
    // stream (host-side optimizer updates); empty: node_s for those too.
    std::vector<double> host_node_s = {};
    // Per instruction of *program, or empty: seconds a transfer took in a real
    // step (Executor::transfer_times), in place of its model; 0 for the rest.
    // A swap takes its time (stretched by core sharing, as a compute
    // instruction). A collective's time on each member includes its wait for
    // the others; when every member has one above 0, the collective takes the
    // least of them from its last member's arrival (the member that arrived
    // last waited least: its time is the transfer itself).
    std::vector<double> transfer_s = {};
    // Per instruction of *program, or empty: seconds its stream took to get
    // to it in a real step (Executor::gap_times: the executor's work between
    // instructions and the stream's thread waiting for a core), added before
    // it on top of StepSimOptions::instruction_overhead_s.
    std::vector<double> gap_s = {};
};

struct StepSimOptions {
    Machine machine = flat_machine(1);  // devices() must equal the number of ranks
    double swap_in_bandwidth = 0;       // host to device, bytes/s (needed when a swap-in moves bytes)
    double swap_out_bandwidth = 0;      // device to host, bytes/s
    // Seconds added to every instruction but an event wait (a launch's or a
    // call's fixed cost, for times that do not include it); a wait's cost is
    // its hand-off (RankProgram::wait_s). Predictions from a real step's
    // times leave it 0 and give the measured gaps (RankProgram::gap_s).
    double instruction_overhead_s = 0;
    int64_t batch = 0;  // samples in one step of the whole job, for throughput
    // 0: every stream runs on its own engine (a GPU's compute and copy
    // engines), or the times given were measured while the streams shared
    // their cores (a real step's: stretching them would count the sharing
    // twice). Otherwise each rank's streams are threads sharing this many
    // cores (the CPU device, its rank bound to them): while more of the rank's
    // compute and swap instructions and moving collectives run at once than
    // there are cores, each runs at cores / running of its speed (processor
    // sharing). Compute and swap instructions stretch; a collective, whose
    // time the link model gives, only takes its share.
    double cores_per_rank = 0;
};

// When one instruction ran, in seconds from the step's start. A collective
// starts when its data starts moving (after its peers have arrived).
struct InstructionTime {
    double start_s = 0, end_s = 0;
    bool operator==(const InstructionTime &) const = default;
};

// Where one rank's step goes, seen from its compute stream:
// compute + exposed comm + exposed swap + idle = step.
struct RankStepTime {
    double step_s = 0;          // the end of its last instruction
    double compute_s = 0;       // the compute stream running compute instructions
    double exposed_comm_s = 0;  // the compute stream waiting on the comm stream (or running a collective)
    double exposed_swap_s = 0;  // the compute stream waiting on a swap stream (or running a swap)
    double idle_s = 0;          // the rest: before its first and after its last instruction
    std::vector<InstructionTime> times;  // per instruction of the program
};

struct StepPrediction {
    std::vector<RankStepTime> ranks;
    double step_s = 0;  // the slowest rank's step
    int slowest_rank = 0;
    double throughput = 0;  // batch / step_s, samples per second (0 for a step of no time)
    // One line per rank and one for the job, times in ms.
    std::string to_string() const;
};

// Simulates one step of every rank. Throws tessera::Error for bad input: a
// rank count other than the machine's devices, a missing graph or program, a
// node-time list of the wrong length or a negative time, a program that
// check_program() refuses, a swap with no bandwidth to run at, a collective
// whose members disagree, and a deadlock (a collective some member never
// reaches, or an event wait that can never end), naming the node and the ranks.
StepPrediction simulate_step(const std::vector<RankProgram> &ranks, const StepSimOptions &options);

}  // namespace tessera
