// The machine tessera-train plans on, from where the launch put its ranks.
//
// Rank r runs device r of the machine, and devices are numbered with the
// outermost (slowest) level most significant (lower.h's rank_coords), so a
// two-level machine of m ranks per node needs ranks 0..m-1 on node 0, m..2m-1
// on node 1, and so on: mpirun's default placement (by slot) and Slurm's block
// distribution. Then:
//   - a job on one node plans on the flat machine of its ranks;
//   - a job over several nodes, each holding the same number of consecutive
//     ranks, plans on nodes x ranks per node (cluster_machine's link speeds),
//     so the first cut falls on the network between the nodes;
//   - any other placement (nodes of unequal size, ranks dealt round-robin)
//     plans flat, and the banner says why: that plan is as correct, only blind
//     to which links are slow, whereas an error would stop a job that can run.
// --nodes K declares K nodes of consecutive ranks instead of the launch's, so
// the two-level path runs on one host. --machine FILE gives the levels and
// their link speeds; its devices must be the job's ranks, and its outermost
// level the nodes (the launch's, or --nodes K's). Mismatches are errors that
// name both numbers.
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/partition/machine.h"

namespace tessera {

// Where a job's ranks run: nodes x per_node == ranks.
struct JobShape {
    int ranks = 1;
    int nodes = 1, per_node = 1;
    int declared_nodes = 0;  // --nodes K; 0: the launch's nodes
    std::string flat_why;    // why a job over several nodes plans flat; empty otherwise
};

// Every rank's placement in world-rank order, gathered with one all_gather
// (every rank learns every other's node). Without a communicator, this process's.
std::vector<Communicator::Placement> gather_placements(Communicator *comm);

// The job's shape from its ranks' placements, or from --nodes K (0: not given).
// Throws tessera::Error when K does not divide the ranks.
JobShape job_shape(const std::vector<Communicator::Placement> &placements, int declared_nodes);

// The machine to plan on, and one line that says where it came from and its
// links, for the banner.
struct JobMachine {
    Machine machine;
    std::string description;
};

// From the shape alone (machine_path empty), or with the levels and link
// speeds of --machine FILE, checked against the shape. Throws tessera::Error
// naming the file and both numbers when they disagree.
JobMachine job_machine(const JobShape &shape, const std::string &machine_path);

}  // namespace tessera
