// A partition plan, as a value: for every operator and level its strategy, for
// every tensor its layout, every communication step with its bytes, the memory
// each device needs, and the predicted communication time. It compares, prints
// and round-trips through JSON; tessera-plan renders it, and lowering
// turns it into one graph per device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/partition/layout.h"
#include "tessera/partition/machine.h"
#include "tessera/types.h"

namespace tessera {

struct OpPlan {
    std::string node;                   // the node's name
    std::string op;                     // "matmul"
    int group = 0;                      // its op group after coarsening
    std::vector<std::string> strategy;  // per level: "split m", "split k (partial sum)", "replicate"
    std::vector<std::string> inputs, outputs;  // tensor names, for views of the dataflow
    bool operator==(const OpPlan &) const = default;
};

struct TensorPlan {
    std::string tensor;
    std::string role;                   // "param", "activation", ...
    Shape shape;                        // whole
    Shape local_shape;                  // on each device
    int group = 0;                      // its tensor group after coarsening
    std::vector<Layout> layout;         // per level
    int64_t bytes = 0;                  // whole
    int64_t local_bytes = 0;            // on each device
    std::string dtype = "f32";          // its storage type (dtype_name); plans older than it are f32
    bool operator==(const TensorPlan &) const = default;
};

struct CommStep {
    int level = 0;
    CommKind kind = CommKind::AllGather;
    std::string node;     // the operator whose input or output is converted
    std::string tensor;
    std::string what;     // "input 1: split(0) -> replicated", "stage row_sum"
    int64_t bytes = 0;    // received by all devices together, per iteration
    double time_s = 0;    // alpha-beta prediction
    bool operator==(const CommStep &) const = default;
};

// Bytes on one device: the device holding the longest block of every uneven
// split (rank 0), the most any device holds.
struct MemoryFootprint {
    int64_t weights = 0;          // parameters and constants
    int64_t gradients = 0;        // gradients of parameters
    int64_t optimizer_state = 0;
    int64_t activations = 0;      // activations, data and their gradients, all of them
    int64_t comm_buffers = 0;     // the largest set of received buffers one operator needs
    // bf16 or f16 working copies of weights and constants (graph/precision.h),
    // at their peak; 0 in fp32.
    int64_t working_copies = 0;
    int64_t total() const { return weights + gradients + optimizer_state + activations + working_copies + comm_buffers; }
    bool operator==(const MemoryFootprint &) const = default;
};

struct Plan {
    std::string model;
    std::string strategy;               // "tofu", "data", "ddp", "owt", "equalchop", "brute"
    int devices = 1;
    Machine machine;
    std::vector<Cut> cuts;
    int ops_before_coarsening = 0, ops_after_coarsening = 0;
    int tensors_before_coarsening = 0, tensors_after_coarsening = 0;

    std::vector<OpPlan> ops;            // graph node order
    std::vector<TensorPlan> tensors;    // graph tensor order
    std::vector<CommStep> comm;         // level, then node order

    std::vector<int64_t> level_bytes;   // per level: c_l times the number of groups
    // Tofu's recursive count, per iteration, all devices: c1 + k1 c2 + k1 k2 c3
    // + ... Exact for one cut; over several it can differ from what lowering
    // sends (a level's conversion of a block another level splits again).
    int64_t search_bytes = 0;
    // Per iteration, all devices: what lowering sends for a plan made to run
    // (the sum of rank_comm_bytes), else search_bytes.
    int64_t comm_bytes = 0;
    double predicted_comm_time_s = 0;
    // Plans made to run (PartitionOptions::executable): the bytes each rank
    // sends per step once lowered (lower.h), exact. Empty otherwise.
    bool executable = false;
    std::vector<int64_t> rank_comm_bytes;
    // Their sum: what every rank together sends per step (0 for a plan not
    // made to run).
    int64_t lowered_comm_bytes() const {
        int64_t sum = 0;
        for (int64_t b : rank_comm_bytes) sum += b;
        return sum;
    }
    double search_time_s = 0;           // the one field that differs between runs
    // Lowering fuses each rank's all-reduces into buckets of this many bytes
    // (lower.h, fuse_collectives; PartitionOptions::bucket_bytes); 0: one
    // collective per tensor.
    int64_t bucket_bytes = 0;
    // Batch norm normalises each device's block by its own statistics (the
    // `ddp` strategy, as PyTorch DDP without SyncBatchNorm), so the result is
    // not the single device's; lowering reads the operators' strategies with
    // lang's strategies_for(..., local_batch_norm).
    bool local_batch_norm = false;

    MemoryFootprint memory;             // per device
    // Per device: persistent tensors, plus the largest set of non-persistent
    // tensors live at once running the nodes in graph order, plus comm buffers.
    int64_t per_device_peak_bytes = 0;
    int64_t single_device_peak_bytes = 0;  // the same measure for the whole graph on one device

    // Why something was replicated or could not be split, one line each.
    std::vector<std::string> notes;

    bool operator==(const Plan &) const = default;
};

std::string plan_to_json(const Plan &p, int indent = 2);
// Throws tessera::Error naming `source` and the field on malformed input.
Plan plan_from_json(const std::string &text, const std::string &source);

}  // namespace tessera
