// Lowering's private parts, shared by lower.cpp (each node's blocks and the
// driver) and lower_comm.cpp (the communication between them): the Lowerer,
// which builds one rank's graph from a plan, and what all ranks' lowerings
// share (PlanLowering::Shared).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cost.h"
#include "lower_state.h"
#include "tessera/error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/lang/strategy.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"

namespace tessera {

// What every rank's lowering of one plan computes alike: each operator's
// strategies, and for each of its inputs the block every rank reads. One
// rank's lowering needs all ranks' blocks (a redistribution pairs senders and
// receivers), so lowering N ranks one by one computes these N times over.
struct PlanLowering::Shared {
    std::vector<std::vector<const Strategy *>> choices;  // per node, per level
    struct InputBlocks {
        std::vector<std::vector<Box>> block, want;  // per input, per rank
    };
    std::vector<InputBlocks> blocks;  // per node
    std::vector<std::vector<int64_t>> stage_counts;  // per node, per rank: a staged operator's reduced elements
    std::vector<std::vector<Box>> held;  // per tensor, per rank: the box its planned layout gives the rank
    // Per node, per input: whether every rank's block of the input is the one
    // it holds (no redistribution), which a rank alone would compare for all.
    std::vector<std::vector<char>> reads_held;
    BucketPlan buckets;  // decided on rank 0's graph (Plan::bucket_bytes)
};

namespace lowering {

// One rank's part of a redistribution: boxes in whole-tensor coordinates.
struct Moves {
    std::vector<std::pair<int, Box>> sends, recvs;  // by peer, ascending
    std::vector<Box> local;
    int64_t bytes = 0;
};

inline std::string var_of_label(const std::string &label) {
    if (label.rfind("split ", 0) != 0) return "";
    std::string rest = label.substr(6);
    return rest.substr(0, rest.find(' '));
}

using InputBlocks = PlanLowering::Shared::InputBlocks;

class Lowerer {
public:
    Lowerer(const Graph &g, const Plan &plan, const PlanLowering::Shared *shared = nullptr)
        : g_(g), plan_(plan), shared_(shared) {
        for (const Cut &c : plan.cuts) cuts_.push_back(c.k);
        n_ = 1;
        for (int k : cuts_) n_ *= k;
        TESSERA_CHECK(n_ == plan.devices, "lowering: the plan's cuts multiply to ", n_, " but it has ",
                      plan.devices, " devices");
        TESSERA_CHECK(static_cast<int>(plan.ops.size()) == g.num_nodes() &&
                          static_cast<int>(plan.tensors.size()) == g.num_tensors(),
                      "lowering: the plan has ", plan.ops.size(), " operators and ", plan.tensors.size(),
                      " tensors, but the graph has ", g.num_nodes(), " and ", g.num_tensors(),
                      "; was it made for another model or batch size?");
        for (NodeId n = 0; n < g.num_nodes(); n++)
            TESSERA_CHECK(plan.ops[n].node == g.node(n).call.name, "lowering: the plan's operator ", n, " is '",
                          plan.ops[n].node, "' but the graph's is '", g.node(n).call.name,
                          "'; was it made for another model?");
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            TESSERA_CHECK(plan.tensors[t].tensor == g.tensor(t).name && plan.tensors[t].shape == g.tensor(t).type.shape,
                          "lowering: the plan's tensor ", t, " is '", plan.tensors[t].tensor, "' ",
                          shape_str(plan.tensors[t].shape), " but the graph's is '", g.tensor(t).name, "' ",
                          shape_str(g.tensor(t).type.shape), "; was it made for another model or batch size?");
            TESSERA_CHECK(plan.tensors[t].layout.size() == cuts_.size(), "lowering: tensor '", g.tensor(t).name,
                          "' has ", plan.tensors[t].layout.size(), " layouts for ", cuts_.size(), " cuts");
        }
        for (int r = 0; r < n_; r++) coords_.push_back(rank_coords(cuts_, r));
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            bool partial = false;
            for (const Layout &l : plan.tensors[t].layout) partial = partial || l.is_partial();
            TESSERA_CHECK(!partial || g.tensor(t).role == TensorRole::Gradient, "lowering: the plan holds tensor '",
                          g.tensor(t).name, "' (", role_name(g.tensor(t).role),
                          ") as partial sums, which only a gradient may be");
            held_state_.push_back(state_of(plan.tensors[t].layout));
            held_what_.push_back("tensor '" + g.tensor(t).name + "'");
        }
    }

    // Builds rank `rank`'s graph; with rank < 0 only counts every rank's bytes.
    DeviceGraph run(int rank);
    std::vector<int64_t> bytes() const { return bytes_; }

private:
    Box held(TensorId t, int r) const {
        return box_in(g_.tensor(t).type.shape, held_state_[t], cuts_, coords_[r], held_what_[t]);
    }

    // The node's strategy per level, and per input, per rank: the block its
    // strategies read (`block`), and the same before clamping to the tensor
    // (`want`: rows a window's padding covers lie outside it). From the shared
    // part when there is one.
    const std::vector<const Strategy *> &choices_of(NodeId n);
    const InputBlocks &blocks_of(NodeId n, const std::vector<const Strategy *> &choice);
    const std::vector<int64_t> &stage_counts_of(NodeId n, const std::vector<std::vector<Box>> &in_boxes);
    const std::vector<Box> &held_all(TensorId t);

public:
    std::vector<const Strategy *> choices(NodeId n) const;
    InputBlocks input_blocks(NodeId n, const std::vector<const Strategy *> &choice) const;
    // Per rank, the elements of a staged operator's reduced stage on the
    // blocks `in_boxes` (per input, per rank).
    std::vector<int64_t> stage_counts(NodeId n, const std::vector<std::vector<Box>> &in_boxes) const;
    std::vector<Box> held_boxes(TensorId t) const;

private:
    TensorId add_lowest_rows(TensorId in, const Box &block, int d, int64_t before, int64_t after, const Node &node,
                             const std::string &name);
    std::vector<Box> made_blocks(const Node &node, const std::vector<const Strategy *> &choice,
                                 const std::vector<Box> &out_box) const;
    std::vector<TensorId> keep_blocks(const Node &node, std::vector<TensorId> outs, const std::vector<Box> &made,
                                      const std::vector<Box> &out_box);
    std::vector<TensorId> add_local_slice(const Node &node, OpCall call, TensorId in, const Box &in_block,
                                          const Box &out);
    std::vector<TensorId> add_block_op(const Node &node, const std::vector<const Strategy *> &choice,
                                       const std::vector<int64_t> &wide,
                                       std::vector<TensorId> local_in, const InputBlocks &blocks,
                                       const std::vector<Box> &out_box);
    std::vector<Moves> redistribute(const std::vector<Box> &have, const State &from, const std::vector<Box> &target,
                                    size_t elem) const;
    Moves redistribute_for(int rank, const std::vector<Box> &have, const State &from, const std::vector<Box> &target,
                           size_t elem) const;
    bool holds_for(const State &from, int src, int dst) const;
    TensorId add_fed_block(TensorId whole, const Box &box);
    // `held_is_target`: whether the boxes of the tensor's own layout are
    // `target` (1 or 0), or -1 when not known; it decides only where `from`
    // cuts as the layout does.
    TensorId add_redistribute(TensorId src, const State &from, const std::vector<Box> &target, size_t elem,
                              TensorId whole, TensorRole role, const std::string &why, int held_is_target = -1);
    TensorId add_reduction(TensorId src, const Shape &shape, State &st, const std::vector<Box> &target,
                           DType dtype, TensorId whole, TensorRole role, const std::string &why);
    TensorId reduce_partials(TensorId src, State &st, const std::vector<bool> &keep, const std::vector<Box> &target,
                             TensorId whole, TensorRole role, const std::string &why, bool wide = false);
    std::vector<int64_t> summed_wide(const Node &node, const std::vector<State> &out_state, bool staged) const;
    TensorId add_narrowing(TensorId in, const Node &node, TensorId source);
    TensorId read_input(TensorId src, TensorId t, const std::vector<bool> &keep, const std::vector<Box> &target,
                        TensorRole role, const std::string &why, int held_is_target = -1);
    std::vector<bool> adds_partial_sums(NodeId n) const;
    TensorId keep_on_one_member(TensorId cur, State &st, const std::vector<bool> &held_partial, const Node &node,
                                TensorId t, const Box &box);
    TensorId add_scale(TensorId in, double alpha, const Node &node, const std::string &suffix, TensorId source,
                       const Box &box);
    TensorId add_comm(const std::string &why, const CommAttrs &attrs, TensorId in, DType dtype, const Box &out_box,
                      TensorId source, TensorRole role);
    double mean_rescale(const Node &node, const Box &in) const;
    // softmax_xent_grad's seed (its dloss input) times `alpha`, on this rank.
    TensorId rescaled_seed(TensorId seed, double alpha, const Node &node);
    std::vector<TensorId> add_op(const OpCall &call, const std::vector<TensorId> &in, const Node &node,
                                 const std::vector<Box> &boxes);
    std::vector<TensorId> add_staged(NodeId n, const std::vector<const Strategy *> &choice,
                                     const std::vector<TensorId> &local_in,
                                     const std::vector<std::vector<Box>> &in_boxes,
                                     const std::vector<Box> &out_box);
    TensorId add_stage_reduction(TensorId stage, DType dtype, const std::vector<bool> &levels, const std::string &reduce,
                                 const std::vector<int64_t> &counts, const std::string &why);
    void lower_node(NodeId n);

    const Graph &g_;
    const Plan &plan_;
    const PlanLowering::Shared *shared_ = nullptr;
    // What the *_of accessors return without a shared part.
    std::vector<const Strategy *> choice_scratch_;
    InputBlocks blocks_scratch_;
    std::vector<int64_t> counts_scratch_;
    std::vector<Box> held_scratch_;
    std::vector<int> cuts_;
    int n_ = 1;
    std::vector<std::vector<int>> coords_;
    RankGroups groups_{coords_, cuts_};
    // Per tensor of the plan: its layout as a State, and how errors name it.
    std::vector<State> held_state_;
    std::vector<std::string> held_what_;
    int rank_ = 0;
    bool build_ = false;
    DeviceGraph dg_;
    std::vector<int64_t> bytes_;
    int comm_counter_ = 0;
    std::map<std::pair<TensorId, std::vector<int64_t>>, TensorId> fed_blocks_;  // (tensor, box) -> its input
};

}  // namespace lowering

}  // namespace tessera
