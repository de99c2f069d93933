// A program: what one device does in one step, as a list of instructions, each
// bound to a stream. Within a stream, instructions run in list order; across
// streams, only events order them (record on one stream, wait on another), as
// in CUDA. Programs are planned without a device: build_program() here for
// a graph and an order, build_swap_run() (swap/swap_program.h) from swap plans;
// the executor (exec/executor.h) interprets one against a memory plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/graph/graph.h"
#include "tessera/program/stream.h"

namespace tessera {

struct Instruction {
    enum class Kind : uint8_t { Compute, EventRecord, EventWait, SwapOut, SwapIn, Collective };
    Kind kind = Kind::Compute;
    StreamKind stream = StreamKind::Compute;
    NodeId node = kNoNode;  // Compute (and Collective, for its communication node)
    int event = -1;         // EventRecord, EventWait: index into the program's events
    // SwapOut, SwapIn: the storage root moved, its region in the host area
    // (MemoryPlan::host_offset) and its bytes (the whole tensor).
    TensorId tensor = kNoTensor;
    int64_t host_offset = 0;
    int64_t bytes = 0;
    // SwapIn: the arena offset the tensor is copied to; it lives there from
    // then on (in list order). SwapOut: where the program expects the tensor
    // to be (checked by the executor), or -1 to take it wherever it is.
    // Compute: -1, or a recomputation: the node, computed earlier in the
    // program, runs again and writes its single output afresh at this offset
    // (the swap planner's dropped activations).
    int64_t offset = -1;

    static Instruction compute(NodeId n, StreamKind s = StreamKind::Compute) {
        Instruction i;
        i.kind = Kind::Compute;
        i.stream = s;
        i.node = n;
        return i;
    }
    // Runs node n again, its single output written at arena offset `at`.
    static Instruction recompute(NodeId n, int64_t at) {
        Instruction i = compute(n);
        i.offset = at;
        return i;
    }
    // A communication node (Node::comm), run with the executor's communicator.
    static Instruction collective(NodeId n) {
        Instruction i;
        i.kind = Kind::Collective;
        i.stream = StreamKind::Comm;
        i.node = n;
        return i;
    }
    static Instruction record(int event, StreamKind s) {
        Instruction i;
        i.kind = Kind::EventRecord;
        i.stream = s;
        i.event = event;
        return i;
    }
    static Instruction wait(int event, StreamKind s) {
        Instruction i;
        i.kind = Kind::EventWait;
        i.stream = s;
        i.event = event;
        return i;
    }
    // Copies the tensor's current arena bytes to [host_offset, +bytes) of the
    // host area. The tensor stays resident (and readable) until something
    // else is written over it or it is swapped in elsewhere.
    static Instruction swap_out(TensorId t, int64_t host_offset, int64_t bytes, int64_t from_offset = -1,
                                StreamKind s = StreamKind::SwapOut) {
        Instruction i;
        i.kind = Kind::SwapOut;
        i.stream = s;
        i.tensor = t;
        i.host_offset = host_offset;
        i.bytes = bytes;
        i.offset = from_offset;
        return i;
    }
    // Copies [host_offset, +bytes) of the host area to the arena at `offset`.
    static Instruction swap_in(TensorId t, int64_t offset, int64_t host_offset, int64_t bytes,
                               StreamKind s = StreamKind::SwapIn) {
        Instruction i;
        i.kind = Kind::SwapIn;
        i.stream = s;
        i.tensor = t;
        i.offset = offset;
        i.host_offset = host_offset;
        i.bytes = bytes;
        return i;
    }
    bool operator==(const Instruction &) const = default;
};
const char *instruction_kind_name(Instruction::Kind k);  // "compute", "record", "wait", ...
// "compute 'fc1' on the compute stream", "swap-in 'x' on the swap-in stream",
// "wait e3 on the comm stream": how messages name an instruction.
std::string describe_instruction(const Graph &g, const Instruction &in);

struct Program {
    std::vector<Instruction> instructions;
    int num_events = 0;
    // Per TensorId, the arena offset where this program's producer of a
    // storage root writes it (-1: the memory plan's offset). Empty: every
    // tensor at the memory plan's offset. Swapped programs carry their own
    // placement because two programs on one memory plan (training and
    // evaluation) reuse the slots differently.
    std::vector<int64_t> place;

    // One instruction per line: index, kind, stream, and the node with its
    // inputs and outputs, or the event.
    std::string to_string(const Graph &g) const;
    bool operator==(const Program &) const = default;
};

// Every node of `order`, in that order: operators on the compute stream and
// communication nodes (Node::comm) as collectives on the comm stream. A
// collective starts once the compute stream has run every node before it,
// and the compute stream waits for it only at comm_sync_points(), so
// communication overlaps the compute that does not need its result.
// A reshape that the memory plan makes a view (MemoryPlan::view_of) keeps
// its compute instruction, which orders its readers as before; the verifier
// marks it (VerifiedInstruction::view) and the executor runs nothing for it.
Program build_program(const Graph &g, const std::vector<NodeId> &order);

// Only the nodes of `order` that `targets` depend on, in that order: the
// forward pass for evaluation, run against the training plan (a subset of an
// order keeps every lifetime inside the one the plan allowed for). Throws
// tessera::Error for a target that is neither a graph input nor computed by a
// node of `order`.
Program build_program_for(const Graph &g, const std::vector<NodeId> &order, const std::vector<TensorId> &targets);

// The nodes build_program_for would run, as an order (what the swap planner
// plans the evaluation pass over).
std::vector<NodeId> order_for(const Graph &g, const std::vector<NodeId> &order, const std::vector<TensorId> &targets);

// Checks what the executor relies on: valid node, stream, event and tensor
// ids; each node computed at most once, after its inputs' producers; every
// wait after a record of its event; swaps with non-negative sizes and offsets.
// tessera::Error names the instruction. Whether swaps and placements fit the
// arena and the host area, and whether every tensor is resident when read,
// verify_program() (program/verify.h) checks against a memory plan.
void check_program(const Graph &g, const Program &p);

nlohmann::json program_to_json(const Program &p);
Program program_from_json(const nlohmann::json &j, const std::string &source = "program JSON");

}  // namespace tessera
