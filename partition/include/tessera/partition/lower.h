// Lowering: a partition plan turned into what each rank runs.
//
//   Plan plan = partition(g, flat_machine(4), {.strategy = ..., .executable = true});
//   DeviceGraph dg = lower(g, plan, rank);   // dg.graph: local shapes + comm nodes
//
// Rank r's coordinates: with cuts k_1, k_2, ..., rank = ((i_1 k_2) + i_2) k_3 + ...
// (outermost level most significant). A tensor laid out as L_1, L_2, ... is
// held by r as the box you get by starting from the whole tensor and, for each
// level l, cutting the box into k_l parts along L_l's dimension (when L_l
// splits; parts of ceil and floor size, the longer first: graph/box.h's
// block_lo and block_size) and keeping part i_l.
//
// Each node of the training graph becomes, on every rank and in graph order:
//   1. for each input held in a layout other than the one its strategy reads
//      (the rows its split variable's block maps to, with any halo), a
//      redistribute node: every rank receives the part of its needed box it
//      does not hold, each element from exactly one holder (the one whose
//      coordinates equal the receiver's on every level the tensor is replicated
//      at), by pairwise exchange; a fed tensor (images, labels) instead gets
//      another input of its own, filled by the trainer, and moves nothing;
//   2. the operator on its local blocks (same operator and attributes, with
//      shape attributes made local, and a batch mean rescaled to the whole
//      batch where the loss is split by batch); a window read with a halo runs
//      with its padding off and is padded at the tensor's true borders only; a
//      slice split along its axis runs with its start made local; a strategy
//      that reads its inputs whole and splits an output runs whole and keeps
//      the block;
//   3. for an output of partial sums, one reduction over the ranks that differ
//      only on the partial levels: a reduce-scatter when those ranks' target
//      boxes tile the box, else an all-reduce; then, if the layout still differs
//      from the tensor's, a redistribute.
// Communication nodes are Node::comm nodes whose attributes hold everything the
// executor needs on this rank (the group, the boxes to send and receive, and
// "bytes": what this rank sends). All ranks lower the same plan to the same
// sequence of communication nodes, so the collectives match up.
//
// The byte counts are exact by construction: they are what the executor's
// communicator sends. For a single cut they equal the search's cost model
// (Plan::comm_bytes); across several levels the search's recursive estimate
// c1 + k1 c2 + ... can differ from them (README, design), and the plan records
// the exact counts in Plan::rank_comm_bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/graph/box.h"
#include "tessera/graph/graph.h"
#include "tessera/partition/plan.h"

namespace tessera {

struct DeviceGraph {
    int rank = 0;
    int devices = 1;
    std::vector<int> cuts;        // k per level, outermost first
    Graph graph;                  // local shapes; comm nodes; node order is the run order
    // Per tensor of `graph`: the training-graph tensor it holds part of
    // (kNoTensor for none), and the box of it.
    std::vector<TensorId> source;
    std::vector<Box> box;
    // Per training-graph tensor: the local tensor holding it in its planned
    // layout (what the next node reads, what an update writes).
    std::vector<TensorId> local;
    // Per training-graph tensor: its whole shape and planned layout, so that
    // any rank can tell which block another rank holds.
    std::vector<Shape> shapes;
    std::vector<std::vector<Layout>> layouts;
    Box held_by(TensorId whole, int rank) const;
    int64_t comm_bytes = 0;       // this rank sends per step
    int comm_nodes = 0;

    // The local tensor holding the training-graph tensor named `name`; throws
    // tessera::Error when there is none.
    TensorId local_named(const Graph &whole, const std::string &name) const;
};

// Fused collectives. decide_buckets gathers a rank's all-reduces of one
// group, reduction and dtype into buckets of at least `bucket_bytes` (tensor
// bytes; the last of a group may hold less), as lists of node names;
// fuse_collectives runs each bucket as one communication node whose input i
// becomes output i (the members' tensors keep their ids). A bucket is issued
// where its last member was; the nodes that read a member wait for the whole
// bucket (held back in the order), so gradients are reduced while the backward
// pass goes on and the optimizer updates run after. An all-reduce that reads
// a held node stays alone. A bucket's "bytes" are its members' sum, and the
// communicator's all_reduce_many gives every member the bits it gets alone.
// lower() decides on rank 0's graph and fuses the same buckets on every rank
// (Plan::bucket_bytes; 0 fuses nothing), so that all ranks run their shared
// collectives in one order.
using BucketPlan = std::vector<std::vector<std::string>>;
BucketPlan decide_buckets(const Graph &rank_graph, int64_t bucket_bytes);
// Throws tessera::Error when a bucket's members are not all-reduces this rank
// can fuse in the same way.
void fuse_collectives(DeviceGraph &dg, const BucketPlan &buckets);

// FSDP's prefetch: each redistribution of a weight shard (the gather before
// an operator reads the weight whole) moves up to just before the previous
// operator that read a gathered weight, so it runs while that layer computes.
// lower() applies it to `fsdp` plans, after fusing.
void prefetch_weight_gathers(DeviceGraph &dg);

// Throws tessera::Error when the plan does not fit the graph or uses a strategy
// lowering cannot run (a dropout block, a partial maximum; plan with
// PartitionOptions::executable).
DeviceGraph lower(const Graph &g, const Plan &plan, int rank);

// Lowering every rank of one plan (a benchmark predicting each rank's step):
// what all ranks' lowerings compute alike (each operator's strategies, every
// rank's input blocks) is computed once, here, so N ranks cost O(N) of it
// rather than O(N^2). rank(r) equals lower(g, plan, r); it only reads the
// shared part, so threads may build ranks at once. `g` and `plan` must
// outlive it.
class PlanLowering {
public:
    PlanLowering(const Graph &g, const Plan &plan);
    ~PlanLowering();
    PlanLowering(const PlanLowering &) = delete;
    PlanLowering &operator=(const PlanLowering &) = delete;
    DeviceGraph rank(int r) const;
    struct Shared;

private:
    const Graph &g_;
    const Plan &plan_;
    std::unique_ptr<Shared> shared_;
};

// The bytes each rank sends per step, for every rank (index = rank).
std::vector<int64_t> lowered_comm_bytes(const Graph &g, const Plan &plan);

// The coordinates of `rank` per level (outermost first).
std::vector<int> rank_coords(const std::vector<int> &cuts, int rank);

// The box `rank` holds of a tensor of shape `s` laid out as `layout`.
Box held_box(const Shape &s, const std::vector<Layout> &layout, const std::vector<int> &cuts, int rank);

}  // namespace tessera
