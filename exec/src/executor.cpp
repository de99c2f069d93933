#include "tessera/exec/executor.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>

#include "collective.h"
#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/lang/kernels.h"
#include "tessera/program/verify.h"
#include "tessera/size.h"

namespace tessera {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Runs f; when `out` is set, stores the seconds it took there.
template <class F>
void run_timed(double *out, F &&f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (out) *out = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {

constexpr size_t kMaxCachedPrograms = 8;

using Kind = Instruction::Kind;
}  // namespace

// One instruction, resolved against the plan: what the stream threads read.
struct Executor::Prepared {
    struct Step {
        Instruction::Kind kind;
        StreamKind stream;
        int event = -1;
        const OpCall *call = nullptr;
        std::unique_ptr<Collective> collective;
        std::vector<TensorRef> inputs, outputs;
        void *dst = nullptr;  // swaps
        const void *src = nullptr;
        int64_t copy_bytes = 0;
        int64_t born = 0;       // bytes that become live when the step starts
        int64_t died = 0;       // bytes that die when it ends
        int64_t touch_end = 0;  // the largest offset + size it touches
        NodeId node = kNoNode;  // Compute, Collective
        bool view = false;      // Compute: a reshape the memory plan makes a view, which runs nothing
        // Collectives on a device whose arena the host cannot address: the
        // input is copied to `stage_in`, the collective runs on host memory,
        // and `stage_out` is copied back (pinned, allocated once per program).
        PinnedBuffer stage_in, stage_out;
        // Collectives: each member's input and output buffer, in the arena or,
        // staged, in stage_in and stage_out (members packed in order).
        Collective::Inputs in_bufs, staged_in;
        Collective::Outputs out_bufs, staged_out;
        // A collective whose buffers the host cannot address runs on host
        // copies: every member's input packed into stage_in, its output into
        // stage_out.
        void stage_on_host(Device &device) {
            auto total = [](const std::vector<TensorRef> &refs) {
                size_t bytes = 0;
                for (const TensorRef &r : refs) bytes += static_cast<size_t>(r.type.bytes());
                return bytes;
            };
            stage_in = device.allocate_host(total(inputs));
            stage_out = device.allocate_host(total(outputs));
            size_t in_at = 0, out_at = 0;
            for (size_t m = 0; m < inputs.size(); m++) {
                staged_in.push_back(stage_in.data() + in_at);
                staged_out.push_back(stage_out.data() + out_at);
                in_at += static_cast<size_t>(inputs[m].type.bytes());
                out_at += static_cast<size_t>(outputs[m].type.bytes());
            }
        }
        bool on_device = false;  // a collective on device memory through the device communicator
        std::chrono::steady_clock::time_point started{};  // set on the stream thread when timing
    };
    Program program;  // the cache key
    std::vector<Step> steps;
    std::vector<std::unique_ptr<Event>> events;
    // Per event, when timing: when its latest record was reached on its
    // stream (steady_clock nanoseconds; atomic, as a re-record may race a wait).
    std::unique_ptr<std::atomic<int64_t>[]> recorded;
};

Executor::Executor(const Graph &g, Device &device, MemoryPlan plan)
    : graph_(g), device_(device), plan_(std::move(plan)) {
    check_memory_plan(graph_, plan_);
    int64_t have = device_.arena_bytes();
    TESSERA_CHECK(plan_.arena_bytes <= have, "the memory plan needs ", plan_.arena_bytes, " bytes (",
                  format_bytes(plan_.arena_bytes), ") but the ", device_.name(), " device arena has ", have,
                  " bytes (", format_bytes(have), "); use --device-mem ", size_flag_at_least(plan_.arena_bytes),
                  " or more");
    persistent_ = persistent_tensors(graph_);
    for (TensorId t = 0; t < graph_.num_tensors(); t++)
        if (persistent_[t] && storage_root(graph_, t) == t && plan_.offset[t] >= 0 && !host_homed(t))
            persistent_bytes_ += graph_.tensor(t).type.bytes();
    if (plan_.host_bytes > 0) host_ = device_.allocate_host(static_cast<size_t>(plan_.host_bytes));
}

Executor::~Executor() = default;

bool Executor::host_homed(TensorId t) const {
    TensorId r = storage_root(graph_, plan_, t);
    return persistent_[r] && plan_.host_offset_of(r) >= 0;
}

std::byte *Executor::home(TensorId t, const char *what, bool *in_host) {
    TESSERA_CHECK(t >= 0 && t < graph_.num_tensors(), what, ": tensor id ", t, " does not exist; the graph has ",
                  graph_.num_tensors(), " tensors");
    if (host_homed(t)) {
        *in_host = true;
        return host_.data() + plan_.host_offset_of(storage_root(graph_, plan_, t));
    }
    int64_t off = plan_.offset[t];
    TESSERA_CHECK(off >= 0, what, ": tensor '", graph_.tensor(t).name,
                  "' has no storage in the memory plan: no node of the plan's order produces it");
    *in_host = false;
    return device_.arena() + off;
}

std::byte *Executor::address(TensorId t) {
    bool in_host = false;
    std::byte *p = home(t, "address", &in_host);
    TESSERA_CHECK(!in_host, "address: tensor '", graph_.tensor(t).name,
                  "' is host-homed: between steps its value is in host memory (host offset ",
                  plan_.host_offset_of(storage_root(graph_, plan_, t)), "), not in the arena; use read() or write()");
    return p;
}

void Executor::write(TensorId t, const void *host, size_t bytes) {
    bool in_host = false;
    std::byte *p = home(t, "write", &in_host);
    const TensorInfo &info = graph_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "write to '", info.name, "': got ", bytes,
                  " bytes but ", type_str(info.type), " takes ", info.type.bytes(), " bytes");
    if (in_host) std::memcpy(p, host, bytes);
    else device_.copy_to_device(p, host, bytes);
}

void Executor::read(TensorId t, void *host, size_t bytes) {
    bool in_host = false;
    std::byte *p = home(t, "read", &in_host);
    const TensorInfo &info = graph_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "read of '", info.name, "': asked for ", bytes,
                  " bytes but ", type_str(info.type), " has ", info.type.bytes(), " bytes");
    if (in_host) std::memcpy(host, p, bytes);
    else device_.copy_to_host(host, p, bytes);
}

void Executor::initialize(uint64_t seed) {
    // Staged in chunks: the host never holds more than one chunk of a tensor,
    // and `first` keeps each element's value independent of the chunking.
    constexpr int64_t kChunk = 1 << 20;
    std::vector<float> staging;
    for (TensorId t = 0; t < graph_.num_tensors(); t++) {
        const TensorInfo &info = graph_.tensor(t);
        if (storage_root(graph_, plan_, t) != t) continue;
        bool in_host = host_homed(t);
        if (!in_host && plan_.offset[t] < 0) continue;
        bool data = info.role == TensorRole::Data;
        if (!data && !is_persistent(info.role)) continue;
        Init init = data ? Init::zeros() : info.init;
        TESSERA_CHECK(info.type.dtype == DType::F32 || init.kind == Init::Kind::Zeros, "tensor '", info.name,
                      "' is ", type_str(info.type), " but has initialiser ", init_str(init),
                      "; only f32 tensors can have a non-zero initialiser");
        int64_t n = info.type.elements();
        const auto elem = static_cast<int64_t>(dtype_size(info.type.dtype));
        std::byte *base = home(t, "initialize", &in_host);
        for (int64_t first = 0; first < n; first += kChunk) {
            int64_t m = std::min(kChunk, n - first);
            // Zeros are zero bits in every dtype; other initialisers are f32's.
            staging.resize(static_cast<size_t>((m * elem + 3) / 4));
            if (elem == 4) fill_init(init, seed, info.name, info.type.shape, staging.data(), m, first);
            else std::fill(staging.begin(), staging.end(), 0.0f);
            const auto chunk = static_cast<size_t>(m * elem);
            if (in_host) std::memcpy(base + first * elem, staging.data(), chunk);
            else device_.copy_to_device(base + first * elem, staging.data(), chunk);
        }
    }
}

// Programs placed by the memory plan alone rely on its lifetimes, which hold
// for its own order and any subsequence of it; say so early, in those terms.
Executor::Prepared &Executor::prepare(const Program &p) {
    for (size_t i = 0; i < cache_.size(); i++) {
        if (cache_[i]->program == p) {
            std::rotate(cache_.begin() + static_cast<std::ptrdiff_t>(i),
                        cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1, cache_.end());
            return *cache_.back();
        }
    }
    std::vector<VerifiedInstruction> verified = verify_program(graph_, p, plan_);
    const bool device_collectives = device_comm_ != nullptr && !device_.host_can_address_arena();
    for (size_t i = 0; i < p.instructions.size(); i++)
        TESSERA_CHECK(p.instructions[i].kind != Kind::Collective || comm_ || device_collectives,
                      "program instruction ", i, " runs the collective '", graph_.node(p.instructions[i].node).call.name,
                      "', but the executor has no communicator (set_communicator)");

    auto prep = std::make_unique<Prepared>();
    prep->program = p;
    prep->steps.resize(p.instructions.size());
    for (int e = 0; e < p.num_events; e++) prep->events.push_back(device_.create_event());
    for (size_t i = 0; i < p.instructions.size(); i++) resolve_step(p, i, verified[i], *prep);

    if (cache_.size() == kMaxCachedPrograms) cache_.erase(cache_.begin());
    cache_.push_back(std::move(prep));
    return *cache_.back();
}

// One instruction as the stream threads run it: the verifier's offsets as
// addresses, and a collective with its staging buffers.
void Executor::resolve_step(const Program &p, size_t i, const VerifiedInstruction &v, Prepared &prep) {
    const Instruction &in = p.instructions[i];
    Prepared::Step &step = prep.steps[i];
    step.kind = in.kind;
    step.stream = in.stream;
    step.event = in.event;
    step.born = v.born;
    step.died = v.died;
    step.touch_end = v.touch_end;
    if (in.kind == Kind::SwapOut || in.kind == Kind::SwapIn) {
        std::byte *device = device_.arena() + v.arena_offset, *host = host_.data() + v.host_offset;
        step.src = in.kind == Kind::SwapOut ? static_cast<const void *>(device) : host;
        step.dst = in.kind == Kind::SwapOut ? static_cast<void *>(host) : device;
        step.copy_bytes = v.bytes;
        return;
    }
    if (in.kind != Kind::Compute && in.kind != Kind::Collective) return;
    const Node &node = graph_.node(in.node);
    step.call = &node.call;
    step.node = in.node;
    step.view = v.view;
    // The verifier gives a host-stream operator's operands in the host area.
    std::byte *base = in.stream == StreamKind::Host ? host_.data() : device_.arena();
    for (size_t k = 0; k < node.inputs.size(); k++)
        step.inputs.push_back({base + v.inputs[k], graph_.tensor(node.inputs[k]).type});
    for (size_t k = 0; k < node.outputs.size(); k++)
        step.outputs.push_back({base + v.outputs[k], graph_.tensor(node.outputs[k]).type});
    if (in.kind != Kind::Collective) return;
    step.on_device = !device_.host_can_address_arena() && device_comm_ != nullptr;
    const Communicator &comm = step.on_device ? *device_comm_ : *comm_;
    step.collective = std::make_unique<Collective>(graph_, in.node, comm.rank(), comm.size());
    if (step.on_device) {
        // Made now, in program order on every rank, not while a step's
        // collectives are in flight on the comm stream.
        for (const Group &g : step.collective->groups()) device_comm_->prepare_group(g);
        device_.comm_workspace();
    }
    for (const TensorRef &r : step.inputs) step.in_bufs.push_back(static_cast<const std::byte *>(r.data));
    for (const TensorRef &r : step.outputs) step.out_bufs.push_back(static_cast<std::byte *>(r.data));
    if (!device_.host_can_address_arena() && !step.on_device) step.stage_on_host(device_);
}

StepStats Executor::run(const Program &p) {
    Prepared &prep = prepare(p);
    if (timing_) {
        node_time_.assign(static_cast<size_t>(graph_.num_nodes()), 0.0);
        handoff_time_.assign(prep.steps.size(), 0.0);
        transfer_time_.assign(prep.steps.size(), 0.0);
        gap_time_.assign(prep.steps.size(), 0.0);
        if (!prep.recorded) prep.recorded = std::make_unique<std::atomic<int64_t>[]>(prep.events.size());
    }

    // A failed step can leave the live count off; between steps exactly the
    // pinned persistent tensors are live.
    MemoryCounters before = device_.counters();
    if (before.live_bytes != persistent_bytes_) device_.add_live_bytes(persistent_bytes_ - before.live_bytes);
    device_.reset_peak();
    before = device_.counters();
    const int64_t comm_before = comm_bytes_so_far();
    // The counters follow the steps on their streams where host work on a
    // stream is cheap (CPU). Elsewhere (CUDA) each would stall its stream, so
    // the same bookkeeping is replayed on the host after the step, in program
    // order: the high water and the swap bytes are the same numbers; the live
    // peak is that of the program order rather than of the streams' timing.
    const bool on_stream = device_.cheap_stream_host_work();
    auto t0 = std::chrono::steady_clock::now();
    stream_mark_.fill(t0);
    try {
        for (size_t i = 0; i < prep.steps.size(); i++) issue_step(prep, i, on_stream);
    } catch (...) {
        // Work already queued points into `prep`: let it finish before unwinding.
        try {
            device_.synchronize();
        } catch (...) {
        }
        throw;
    }
    device_.synchronize();
    auto t1 = std::chrono::steady_clock::now();
    if (!on_stream) replay_counters(prep);

    MemoryCounters after = device_.counters();
    StepStats stats;
    stats.step_time_s = std::chrono::duration<double>(t1 - t0).count();
    stats.peak_live_bytes = after.peak_live_bytes;
    stats.arena_high_water = after.arena_high_water;
    stats.swap_out_bytes = after.swap_out_bytes - before.swap_out_bytes;
    stats.swap_in_bytes = after.swap_in_bytes - before.swap_in_bytes;
    stats.comm_bytes = after.comm_bytes - before.comm_bytes + comm_bytes_so_far() - comm_before;
    return stats;
}

int64_t Executor::comm_bytes_so_far() const {
    return (comm_ ? comm_->counters().total() : 0) + (device_comm_ ? device_comm_->counters().total() : 0);
}

// Issues step i onto its stream, with the counters' bookkeeping on the
// stream when `on_stream`.
void Executor::issue_step(Prepared &prep, size_t i, bool on_stream) {
    Prepared::Step &st = prep.steps[i];
    Stream &s = device_.stream(st.stream);
    auto arrive = [&] {
        if (on_stream)
            s.enqueue([dev = &device_, step = &st] {
                dev->add_live_bytes(step->born);
                dev->note_arena_use(step->touch_end);
            });
    };
    switch (st.kind) {
    case Kind::Compute:
        if (st.view) arrive();  // no kernel: the output already is the input's bytes
        else issue_compute(prep, i, on_stream);
        break;
    case Kind::Collective:
        if (st.on_device) {
            arrive();
            st.collective->enqueue(device_, st.stream, *device_comm_, st.in_bufs, st.out_bufs);
        } else if (st.stage_in.data() == nullptr) {
            arrive();
            s.enqueue([this, i, comm = comm_, step = &st, out = timed_transfer(i)] {
                if (out) note_start(i, step->stream, std::chrono::steady_clock::now());
                run_timed(out, [&] { step->collective->run(*comm, step->in_bufs, step->out_bufs); });
                if (out) note_end(step->stream);
            });
        } else {
            for (size_t m = 0; m < st.inputs.size(); m++)
                device_.copy_async(st.stream, const_cast<std::byte *>(st.staged_in[m]), st.inputs[m].data,
                                   static_cast<size_t>(st.inputs[m].type.bytes()), CopyDirection::DeviceToHost);
            arrive();
            s.enqueue([this, i, comm = comm_, step = &st, out = timed_transfer(i)] {
                if (out) note_start(i, step->stream, std::chrono::steady_clock::now());
                run_timed(out, [&] { step->collective->run(*comm, step->staged_in, step->staged_out); });
                if (out) note_end(step->stream);
            });
            for (size_t m = 0; m < st.outputs.size(); m++)
                device_.copy_async(st.stream, st.outputs[m].data, st.staged_out[m],
                                   static_cast<size_t>(st.outputs[m].type.bytes()), CopyDirection::HostToDevice);
        }
        break;
    case Kind::SwapOut:
    case Kind::SwapIn: issue_swap(prep, i, on_stream); break;
    case Kind::EventRecord:
        if (timing_) s.enqueue([at = &prep.recorded[st.event]] { *at = now_ns(); });
        s.record(*prep.events[st.event]);
        break;
    case Kind::EventWait: issue_wait(prep, i); break;
    }
    if (st.died && on_stream) s.enqueue([dev = &device_, d = st.died] { dev->add_live_bytes(-d); });
}

void Executor::note_start(size_t i, StreamKind s, std::chrono::steady_clock::time_point now) {
    gap_time_[i] = std::max(0.0, std::chrono::duration<double>(now - stream_mark_[static_cast<size_t>(s)]).count());
}

void Executor::issue_compute(Prepared &prep, size_t i, bool on_stream) {
    Prepared::Step &st = prep.steps[i];
    Stream &s = device_.stream(st.stream);
    if (on_stream || timing_)
        s.enqueue([this, i, dev = &device_, step = &st, timing = timing_, on_stream] {
            if (on_stream) {
                dev->add_live_bytes(step->born);
                dev->note_arena_use(step->touch_end);
            }
            if (timing) note_start(i, step->stream, step->started = std::chrono::steady_clock::now());
        });
    if (st.stream == StreamKind::Host)  // the CPU kernel over host memory, whatever the device
        s.enqueue([step = &st] { run_op(*step->call, step->inputs, step->outputs); });
    else
        device_.launch_op(st.stream, *st.call, st.inputs, st.outputs);
    if (timing_)
        s.enqueue([this, step = &st, times = node_time_.data()] {
            times[step->node] = std::chrono::duration<double>(std::chrono::steady_clock::now() - step->started).count();
            note_end(step->stream);
        });
}

// An event wait; when timing, its hand-off too: from when both its stream
// reached it and the record happened to when its stream goes on.
void Executor::issue_wait(Prepared &prep, size_t i) {
    Prepared::Step &st = prep.steps[i];
    Stream &s = device_.stream(st.stream);
    if (timing_)
        s.enqueue([this, i, step = &st] { note_start(i, step->stream, step->started = std::chrono::steady_clock::now()); });
    s.wait(*prep.events[st.event]);
    if (timing_)
        s.enqueue([this, step = &st, recorded = &prep.recorded[st.event], out = &handoff_time_[i]] {
            const int64_t arrived = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        step->started.time_since_epoch()).count();
            *out = std::max<int64_t>(0, now_ns() - std::max(arrived, recorded->load())) * 1e-9;
            note_end(step->stream);
        });
}

void Executor::issue_swap(Prepared &prep, size_t i, bool on_stream) {
    Prepared::Step &st = prep.steps[i];
    const bool in = st.kind == Kind::SwapIn;
    if (on_stream)
        device_.stream(st.stream).enqueue([dev = &device_, step = &st, in] {
            dev->add_live_bytes(step->born);
            if (in) dev->add_swap_in_bytes(step->copy_bytes);
            else dev->add_swap_out_bytes(step->copy_bytes);
        });
    Stream &s = device_.stream(st.stream);
    if (timing_)
        s.enqueue([this, i, step = &st] { note_start(i, step->stream, step->started = std::chrono::steady_clock::now()); });
    device_.copy_async(st.stream, st.dst, st.src, static_cast<size_t>(st.copy_bytes),
                       in ? CopyDirection::HostToDevice : CopyDirection::DeviceToHost);
    if (timing_)
        s.enqueue([this, step = &st, out = &transfer_time_[i]] {
            *out = std::chrono::duration<double>(std::chrono::steady_clock::now() - step->started).count();
            note_end(step->stream);
        });
}

// The streams' bookkeeping, in program order, after the step.
void Executor::replay_counters(const Prepared &prep) {
    for (const Prepared::Step &st : prep.steps) {
        device_.add_live_bytes(st.born);
        device_.note_arena_use(st.touch_end);
        if (st.kind == Kind::SwapIn) device_.add_swap_in_bytes(st.copy_bytes);
        if (st.kind == Kind::SwapOut) device_.add_swap_out_bytes(st.copy_bytes);
        device_.add_live_bytes(-st.died);
    }
}

}  // namespace tessera
