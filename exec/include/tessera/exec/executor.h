// The executor: runs programs on one device, with every tensor at its static
// offset in the device's arena.
//
//   CpuDevice device(parse_size("512MiB", "--device-mem"));
//   MemoryPlan plan = plan_memory(g, default_order(g));
//   Executor ex(g, device, plan);            // throws if the plan does not fit
//   ex.initialize(seed);                     // parameters by their Init
//   Program step = build_program(g, plan.order);
//   ex.write(images, host, bytes); ...;      // feed the Data tensors
//   StepStats s = ex.run(step);              // one training step
//   ex.read(loss, &value, sizeof value);
//
// run() hands each instruction to its stream in list order and waits for the
// device; it allocates no device memory. What it needs per instruction (tensor
// addresses, the bytes that become live and die) is worked out once per
// distinct program and cached, so a step allocates nothing on the host either.
// Live bytes are counted as the streams run (see device.h), so StepStats'
// peak is measured, not copied from the plan. A reshape whose output the
// memory plan makes a view of its input (MemoryPlan::view_of) launches
// nothing, on any device: the output already is the input's bytes.
//
// Swapped runs (swap/swap_program.h). The memory plan may give tensors a region of
// a host area (MemoryPlan::host_offset), allocated once here. Preparing a
// program walks it in list order and follows where each storage root is:
// pinned persistent tensors at their plan offset; host-homed ones not in the
// arena until swapped in; a producer writes where Program::place (or the
// plan) says; a swap-in moves the tensor to its slot. A tensor stays resident
// until something else is written over its bytes. The walk also checks, with
// vector clocks over the streams and events, that every read has seen its
// latest write and every overwrite has seen the last use of what it replaces,
// so a wrong plan fails with a message instead of corrupting tensors.
// Live bytes count each stay in the arena from its production or swap-in to
// the last instruction that touches it (a swap-out counts); pinned
// persistent tensors are the baseline.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/exec/device.h"
#include "tessera/graph/graph.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"

namespace tessera {

class Communicator;
struct VerifiedInstruction;

struct StepStats {
    double step_time_s = 0;
    int64_t peak_live_bytes = 0;   // measured: persistent bytes plus the most transient bytes live at once
    int64_t arena_high_water = 0;  // the largest offset + size a kernel touched
    int64_t swap_out_bytes = 0;    // moved by this step
    int64_t swap_in_bytes = 0;
    int64_t comm_bytes = 0;        // sent by this rank's communicator during the step
};

class Executor {
public:
    // Keeps a copy of `g` and of `plan`, and a reference to `device`, which
    // must outlive the executor. Throws tessera::Error when the plan does not
    // match the graph, or needs a larger arena than the device has (saying
    // which --device-mem would work).
    Executor(const Graph &g, Device &device, MemoryPlan plan);
    ~Executor();
    Executor(const Executor &) = delete;
    Executor &operator=(const Executor &) = delete;

    const Graph &graph() const { return graph_; }
    const MemoryPlan &plan() const { return plan_; }
    Device &device() { return device_; }

    // Param, OptState and Constant tensors from their Init, drawn from `seed`
    // and each tensor's name (init.h); Data tensors are zeroed.
    void initialize(uint64_t seed);

    // Blocking copies of one whole tensor between host memory and the arena.
    // Use them between runs. `bytes` must equal the tensor's size.
    void write(TensorId t, const void *host, size_t bytes);
    void read(TensorId t, void *host, size_t bytes);
    template<typename T>
    std::vector<T> read_vector(TensorId t) {
        std::vector<T> v(static_cast<size_t>(graph_.tensor(t).type.bytes()) / sizeof(T));
        read(t, v.data(), v.size() * sizeof(T));
        return v;
    }
    // The tensor's address in the device's address space (host-readable only
    // on the CPU device). An in-place update has its target's address.
    // Throws for a host-homed tensor: it has no place in the arena between steps.
    std::byte *address(TensorId t);
    // Whether `t` (through its storage root) lives in the host area between
    // steps; write(), read() and initialize() handle such tensors there.
    bool host_homed(TensorId t) const;

    // Runs `p` to completion. Throws tessera::Error for a program that does not
    // fit the graph or the plan (check_program(), and every tensor it touches
    // must have storage and its nodes must follow the plan's order), and
    // rethrows the first error raised on a stream, naming the stream.
    StepStats run(const Program &p);

    // The communicator that collective instructions use; it must outlive the
    // executor. Its rank and size must be those the graph was lowered for.
    void set_communicator(Communicator *comm) { comm_ = comm; }
    // On a device whose arena the host cannot address (CUDA), every
    // collective goes to this communicator instead, on device memory, issued
    // onto the comm stream (NCCL: all-reduces in place; redistributions and
    // reduce-scatters packed and unpacked by box copies through the device's
    // comm workspace). Without it they stage through host memory with
    // set_communicator()'s. Same ranks; it must outlive the executor. Set it
    // before the first run: sub-groups are made when a program is prepared.
    void set_device_communicator(Communicator *comm) { device_comm_ = comm; }

    // Changes a node's attribute between runs (e.g. an optimizer's lr, for a
    // learning-rate schedule); the types must not change (Graph::set_attr).
    // Prepared programs see the change: they refer to the executor's graph.
    void set_attr(NodeId n, const std::string &name, AttrValue value) { graph_.set_attr(n, name, std::move(value)); }

    // Per-operator timing inside the program: when on, run() records how long
    // each compute instruction took on its stream (from the moment its waits
    // were satisfied), so that a swap plan can be re-simulated with the times
    // operators really take in the step (caches, contention with the copies),
    // not alone. CPU device: kernel time; a device with asynchronous kernels
    // would need its own events.
    void set_node_timing(bool on) { timing_ = on; }
    // Seconds per NodeId from the last run() with timing on (0 for nodes it did not compute).
    const std::vector<double> &node_times() const { return node_time_; }
    // Seconds per instruction of the last run() with timing on: for an event
    // wait, from when both its stream reached it and its record happened to
    // when its stream went on (on the CPU device, one thread waking another);
    // 0 for the other instructions.
    const std::vector<double> &handoff_times() const { return handoff_time_; }
    // Seconds per instruction of the last run() with timing on, for the
    // transfers: a swap, from when its stream started the copy to when it
    // ended (CPU device: the copy runs on the stream's thread); a collective
    // run by the host communicator, from when its stream started it to when
    // it returned, waiting for its peers included. 0 for the other
    // instructions and for collectives on the device communicator.
    const std::vector<double> &transfer_times() const { return transfer_time_; }
    // Seconds per instruction of the last run() with timing on: how long its
    // stream took to get to it after its previous timed instruction (compute,
    // swap, wait or host collective) ended, or after the step began: the
    // executor's own work between instructions (the untimed ones, event
    // records, included) and, on the CPU device, the stream's thread waiting
    // for a core. 0 for the untimed instructions.
    const std::vector<double> &gap_times() const { return gap_time_; }

    // Bytes live in the arena between steps: the pinned persistent tensors.
    int64_t persistent_bytes() const { return persistent_bytes_; }

private:
    struct Prepared;
    Prepared &prepare(const Program &p);
    void resolve_step(const Program &p, size_t i, const VerifiedInstruction &v, Prepared &prep);
    void issue_step(Prepared &prep, size_t i, bool on_stream);
    void issue_compute(Prepared &prep, size_t i, bool on_stream);
    void issue_swap(Prepared &prep, size_t i, bool on_stream);
    void issue_wait(Prepared &prep, size_t i);
    void replay_counters(const Prepared &prep);
    int64_t comm_bytes_so_far() const;
    // Where `t`'s value is between steps: the arena or the host area.
    std::byte *home(TensorId t, const char *what, bool *in_host);

    Graph graph_;
    Device &device_;
    MemoryPlan plan_;
    std::vector<bool> persistent_;
    int64_t persistent_bytes_ = 0;
    PinnedBuffer host_;  // the host area, plan_.host_bytes
    bool timing_ = false;
    std::vector<double> node_time_, handoff_time_, transfer_time_, gap_time_;
    // Per stream, when its last timed instruction ended (written by the
    // stream's own thread; set to the step's start before any is issued).
    std::array<std::chrono::steady_clock::time_point, kNumStreams> stream_mark_{};
    // Where transfer instruction i's time goes when timing, else null.
    double *timed_transfer(size_t i) { return timing_ ? &transfer_time_[i] : nullptr; }
    // On instruction i's stream thread, when timing: its gap (gap_times())
    // as it starts at `now`, and the stream's mark as it ends.
    void note_start(size_t i, StreamKind s, std::chrono::steady_clock::time_point now);
    void note_end(StreamKind s) { stream_mark_[static_cast<size_t>(s)] = std::chrono::steady_clock::now(); }
    std::vector<std::unique_ptr<Prepared>> cache_;  // most recently used last
    Communicator *comm_ = nullptr;
    Communicator *device_comm_ = nullptr;
};

}  // namespace tessera
