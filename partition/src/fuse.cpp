// Fused collectives: a rank's all-reduces gathered into buckets, each run as
// one communication node (lower.h: decide_buckets, fuse_collectives).
//
// Both walk a rank's nodes in order. An all-reduce that joins a bucket is held
// back, and so is every node that reads what a held node produces (an
// optimizer update reading a reduced gradient). When a bucket closes, its
// fused node goes where its last member was, so its collective starts as soon
// as its last tensor exists. The held nodes it frees wait, in their old order,
// until a node the walk reaches reads one of them, or the end: so the updates
// stay after the backward pass, which runs on while the buckets are reduced,
// and a chain of operators that waited on a bucket resumes where it is needed.
// An all-reduce that reads a held node cannot join a bucket (it would wait for
// itself); it stays alone.
//
// Deciding closes a bucket of one key (group, reduction, dtype) once it holds
// bucket_bytes, else at the end. Fusing closes each bucket at its last member.
// Every rank fuses the buckets decided on rank 0's graph, by node name: ranks'
// graphs have the same nodes in the same order, but an uneven split gives
// their tensors different sizes, so buckets decided by size on each rank could
// differ, and two ranks running shared collectives in different orders would
// deadlock.
#include <map>
#include <string>

#include "tessera/error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/partition/lower.h"

namespace tessera {

namespace {

struct Bucket {
    std::vector<NodeId> members;
    int64_t bytes = 0;    // the members' tensor bytes
    size_t expected = 0;  // fusing: the members it will have
};

class Fuser {
public:
    Fuser(const Graph &g)
        : g_(g), ready_(static_cast<size_t>(g.num_tensors()), false),
          freed_(static_cast<size_t>(g.num_tensors()), false) {
        for (TensorId t = 0; t < g.num_tensors(); t++) ready_[t] = g.tensor(t).producer == kNoNode;
    }

    // Buckets of at least `cap` bytes; each bucket's member names.
    BucketPlan decide(int64_t cap) {
        cap_ = cap;
        walk();
        return std::move(decided_);
    }

    // The graph's nodes with the buckets of `plan` fused.
    std::vector<Graph::PlacedNode> fuse(const BucketPlan &plan) {
        for (size_t b = 0; b < plan.size(); b++) {
            for (const std::string &name : plan[b]) assigned_[name] = static_cast<int>(b);
            expected_.push_back(plan[b].size());
        }
        walk();
        TESSERA_CHECK(open_.empty(), "fusing collectives: ", open_.size(), " buckets of rank 0 (the first '",
                      plan[std::stoul(open_.begin()->first)][0], "') are not all on this rank");
        return std::move(out_);
    }

private:
    void walk() {
        for (NodeId n = 0; n < g_.num_nodes(); n++) visit(n);
        while (!open_.empty()) close(open_.begin()->first);
        emit_freed();
        TESSERA_INTERNAL_ASSERT(held_.empty(), "fusing collectives left ", held_.size(), " nodes unplaced");
    }

    // The bucket an all-reduce may join, or "" for any other node.
    std::string key_of(const Node &node) const {
        if (!node.comm || node.inputs.size() != 1) return "";
        if (cap_ == 0) {
            auto it = assigned_.find(node.call.name);
            return it == assigned_.end() ? "" : std::to_string(it->second);
        }
        const CommAttrs a = read_comm_attrs(node.call, g_.tensor(node.inputs[0]).type.rank());
        if (a.kind != CommNodeKind::AllReduce || a.ranks.size() < 2) return "";
        std::string key = a.reduce + " " + dtype_name(g_.tensor(node.inputs[0]).type.dtype);
        for (int r : a.ranks) key += " " + std::to_string(r);
        return key;
    }

    bool inputs_ready(const Node &node) const {
        for (TensorId t : node.inputs)
            if (!ready_[t]) return false;
        return true;
    }

    bool reads_freed(const Node &node) const {
        for (TensorId t : node.inputs)
            if (freed_[t]) return true;
        return false;
    }

    // The freed nodes, in their old order.
    void emit_freed() {
        for (NodeId n : freed_nodes_) {
            for (TensorId t : g_.node(n).outputs) freed_[t] = false;
            emit(n);
        }
        freed_nodes_.clear();
    }

    void emit(NodeId n) {
        for (TensorId t : g_.node(n).outputs) ready_[t] = true;
        out_.push_back({n, {}});
    }

    void emit_fused(const Bucket &b) {
        if (b.members.size() == 1) return emit(b.members[0]);
        Node node = fused(b);
        for (TensorId t : node.outputs) ready_[t] = true;
        out_.push_back({kNoNode, std::move(node)});
    }

    void visit(NodeId n) {
        const Node &node = g_.node(n);
        const std::string key = key_of(node);
        if (reads_freed(node)) emit_freed();
        if (!inputs_ready(node)) {
            TESSERA_CHECK(key.empty() || cap_ > 0, "fusing collectives: '", node.call.name,
                          "' waits on this rank for a bucket it joins on rank 0");
            held_.push_back(n);
            return;
        }
        if (key.empty()) {
            emit(n);
            return;
        }
        Bucket &b = open_[key];
        if (b.members.empty() && cap_ == 0) b.expected = expected_[std::stoul(key)];
        b.members.push_back(n);
        b.bytes += g_.tensor(node.inputs[0]).type.bytes();
        if (cap_ > 0 ? b.bytes >= cap_ : b.members.size() == b.expected) close(key);
    }

    // Emits the bucket's fused node, and frees every held node it lets run.
    void close(const std::string &key) {
        Bucket b = std::move(open_.at(key));
        open_.erase(key);
        if (cap_ > 0) {
            decided_.emplace_back();
            for (NodeId m : b.members) decided_.back().push_back(g_.node(m).call.name);
        }
        emit_fused(b);
        std::vector<NodeId> still;
        for (NodeId n : held_) {
            const Node &node = g_.node(n);
            bool runs = true;
            for (TensorId t : node.inputs) runs = runs && (ready_[t] || freed_[t]);
            if (!runs) {
                still.push_back(n);
                continue;
            }
            for (TensorId t : node.outputs) freed_[t] = true;
            freed_nodes_.push_back(n);
        }
        held_.swap(still);
    }

    Node fused(const Bucket &b) const {
        const Node &first = g_.node(b.members[0]);
        Node node = first;
        node.call.name = "fused:" + first.call.name;
        TESSERA_INTERNAL_ASSERT(!g_.has_name(node.call.name), "the graph already has a node named '",
                                node.call.name, "'");
        CommAttrs attrs = read_comm_attrs(first.call, g_.tensor(first.inputs[0]).type.rank());
        attrs.bytes = 0;
        node.inputs.clear();
        node.outputs.clear();
        for (NodeId m : b.members) {
            const Node &member = g_.node(m);
            attrs.bytes += read_comm_attrs(member.call, g_.tensor(member.inputs[0]).type.rank()).bytes;
            node.inputs.push_back(member.inputs[0]);
            node.outputs.push_back(member.outputs[0]);
        }
        node.call.attrs = comm_attrs_to(attrs);
        return node;
    }

    const Graph &g_;
    int64_t cap_ = 0;                     // deciding: the bucket size; 0 while fusing
    std::map<std::string, int> assigned_;  // fusing: member name -> bucket
    std::vector<size_t> expected_;         // fusing: members per bucket
    BucketPlan decided_;
    std::vector<bool> ready_;  // per tensor: a graph input, or produced by an emitted node
    std::map<std::string, Bucket> open_;
    std::vector<bool> freed_;  // per tensor: made by a freed node, not emitted yet
    std::vector<NodeId> held_;  // in node order
    std::vector<NodeId> freed_nodes_;  // held nodes that may run, waiting to be needed; in node order
    std::vector<Graph::PlacedNode> out_;
};

}  // namespace

BucketPlan decide_buckets(const Graph &rank_graph, int64_t bucket_bytes) {
    TESSERA_CHECK(bucket_bytes > 0, "the bucket size for fused collectives is ", bucket_bytes,
                  " bytes; it must be above 0 to fuse");
    return Fuser(rank_graph).decide(bucket_bytes);
}

void fuse_collectives(DeviceGraph &dg, const BucketPlan &buckets) {
    if (buckets.empty()) return;
    dg.graph.rearrange_nodes(Fuser(dg.graph).fuse(buckets));
    dg.comm_nodes = 0;
    for (const Node &n : dg.graph.nodes()) dg.comm_nodes += n.comm ? 1 : 0;
}

}  // namespace tessera
