#include "tessera/exec/executor.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>

#include "collective.h"
#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/size.h"

namespace tessera {

namespace {

constexpr size_t kMaxCachedPrograms = 8;

using Kind = Instruction::Kind;
using Clock = std::array<int64_t, kNumStreams>;

std::string describe(const Graph &g, const Instruction &in) {
    std::string s = instruction_kind_name(in.kind);
    if (in.kind == Kind::Compute || in.kind == Kind::Collective) s += " '" + g.node(in.node).call.name + "'";
    if (in.kind == Kind::SwapOut || in.kind == Kind::SwapIn) s += " '" + g.tensor(in.tensor).name + "'";
    if (in.kind == Kind::EventRecord || in.kind == Kind::EventWait) s += " e" + std::to_string(in.event);
    return s + " on the " + stream_name(in.stream) + " stream";
}

// An instruction's place in the happens-before order: its stream and that
// stream's count of instructions up to and including it.
struct Point {
    int instr = -1;  // -1: before the step (always seen)
    int stream = 0;
    int64_t tick = 0;
};

// One stay of a storage root in the arena: from its production or swap-in
// until something else is written over its bytes, it is swapped in
// elsewhere, or the step ends. Pinned persistent tensors have one stay, all
// step (born_at -1).
struct Stay {
    TensorId root = kNoTensor;
    int64_t offset = 0, bytes = 0;
    int born_at = -1;
    int last_touch = -1;
    Point writer;                              // the latest write
    std::array<Point, kNumStreams> touched{};  // per stream, the latest touch
};

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
        // Collectives on a device whose arena the host cannot address: the
        // input is copied to `stage_in`, the collective runs on host memory,
        // and `stage_out` is copied back (pinned, allocated once per program).
        PinnedBuffer stage_in, stage_out;
        bool on_device = false;  // an all-reduce on device memory through the device communicator
        std::chrono::steady_clock::time_point started{};  // set on the stream thread when timing
    };
    Program program;  // the cache key
    std::vector<Step> steps;
    std::vector<std::unique_ptr<Event>> events;
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
    TensorId r = storage_root(graph_, t);
    return persistent_[r] && plan_.host_offset_of(r) >= 0;
}

std::byte *Executor::home(TensorId t, const char *what, bool *in_host) {
    TESSERA_CHECK(t >= 0 && t < graph_.num_tensors(), what, ": tensor id ", t, " does not exist; the graph has ",
                  graph_.num_tensors(), " tensors");
    if (host_homed(t)) {
        *in_host = true;
        return host_.data() + plan_.host_offset_of(storage_root(graph_, t));
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
                  plan_.host_offset_of(storage_root(graph_, t)), "), not in the arena; use read() or write()");
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
        if (storage_root(graph_, t) != t) continue;
        bool in_host = host_homed(t);
        if (!in_host && plan_.offset[t] < 0) continue;
        bool data = info.role == TensorRole::Data;
        if (!data && !is_persistent(info.role)) continue;
        Init init = data ? Init::zeros() : info.init;
        TESSERA_CHECK(info.type.dtype == DType::F32 || init.kind == Init::Kind::Zeros, "tensor '", info.name,
                      "' is ", type_str(info.type), " but has initialiser ", init_str(init),
                      "; only f32 tensors can have a non-zero initialiser");
        int64_t n = info.type.elements();
        std::byte *base = home(t, "initialize", &in_host);
        for (int64_t first = 0; first < n; first += kChunk) {
            int64_t m = std::min(kChunk, n - first);
            staging.resize(static_cast<size_t>(m));
            // Zeros are zero bits for i32 as well.
            fill_init(init, seed, info.name, info.type.shape, staging.data(), m, first);
            size_t chunk = static_cast<size_t>(m) * 4;
            if (in_host) std::memcpy(base + first * 4, staging.data(), chunk);
            else device_.copy_to_device(base + first * 4, staging.data(), chunk);
        }
    }
}

// Programs placed by the memory plan alone rely on its lifetimes, which hold
// for its own order and any subsequence of it; say so early, in those terms.
void Executor::check_order(const Program &p) const {
    std::vector<int> plan_pos(graph_.num_nodes(), -1);
    for (size_t i = 0; i < plan_.order.size(); i++) plan_pos[plan_.order[i]] = static_cast<int>(i);
    int last_pos = -1;
    size_t last_instr = 0;
    for (size_t i = 0; i < p.instructions.size(); i++) {
        const Instruction &in = p.instructions[i];
        if (in.kind != Kind::Compute && in.kind != Kind::Collective) continue;
        const Node &node = graph_.node(in.node);
        TESSERA_CHECK(plan_pos[in.node] >= 0, "program instruction ", i, " computes '", node.call.name,
                      "', which is not in the memory plan's order; plan memory for this program's order");
        TESSERA_CHECK(plan_pos[in.node] > last_pos, "program instruction ", i, " computes '", node.call.name,
                      "' after '", graph_.node(p.instructions[last_instr].node).call.name, "' (instruction ",
                      last_instr, "), but the memory plan's order has them the other way round; its tensor "
                      "lifetimes hold only for its own order, so plan memory for this program's order");
        last_pos = plan_pos[in.node];
        last_instr = i;
    }
}

Executor::Prepared &Executor::prepare(const Program &p) {
    for (size_t i = 0; i < cache_.size(); i++) {
        if (cache_[i]->program == p) {
            std::rotate(cache_.begin() + static_cast<std::ptrdiff_t>(i),
                        cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1, cache_.end());
            return *cache_.back();
        }
    }
    check_program(graph_, p);
    for (size_t i = 0; i < p.instructions.size(); i++)
        TESSERA_CHECK(p.instructions[i].kind != Kind::Collective || comm_, "program instruction ", i,
                      " runs the collective '", graph_.node(p.instructions[i].node).call.name,
                      "', but the executor has no communicator (set_communicator)");
    if (p.place.empty()) check_order(p);

    auto prep = std::make_unique<Prepared>();
    prep->program = p;
    prep->steps.resize(p.instructions.size());
    for (int e = 0; e < p.num_events; e++) prep->events.push_back(device_.create_event());

    const int nt = graph_.num_tensors();
    const int64_t arena = plan_.arena_bytes;
    std::vector<Stay> stays;
    std::vector<int> stay_of(nt, -1);     // per root: its current stay, -1 when not in the arena
    std::map<int64_t, int> by_offset;     // the stays with bytes, by offset; they never overlap
    std::vector<char> host_valid(nt, 0);  // per root: the host region holds its current value
    std::vector<Point> host_writer(nt), host_reader(nt);
    std::vector<int> last_write(nt, -1);

    std::array<Clock, kNumStreams> seen{};
    std::vector<Clock> event_clock(p.num_events);
    auto has_seen = [&](int s, const Point &pt) { return pt.instr < 0 || seen[s][pt.stream] >= pt.tick; };
    auto here = [&](int i, int s) { return Point{i, s, seen[s][s]}; };
    auto where = [&](int i) { return detail::concat("program instruction ", i, " (", describe(graph_, p.instructions[i]), ")"); };
    auto race = [&](int i, const Point &other) {
        return detail::concat(": the two would race. Record an event after instruction ", other.instr,
                              " and wait for it on the ", stream_name(p.instructions[i].stream),
                              " stream before instruction ", i);
    };
    auto name = [&](TensorId t) { return "'" + graph_.tensor(t).name + "'"; };

    auto open_stay = [&](TensorId r, int64_t offset, int64_t bytes, int born_at) {
        Stay st;
        st.root = r;
        st.offset = offset;
        st.bytes = bytes;
        st.born_at = born_at;
        st.last_touch = born_at;
        stays.push_back(st);
        int k = static_cast<int>(stays.size()) - 1;
        stay_of[r] = k;
        if (bytes > 0) by_offset[offset] = k;
        return k;
    };
    auto close_stay = [&](int k) {
        Stay &st = stays[k];
        if (st.born_at >= 0) {
            prep->steps[st.born_at].born += st.bytes;
            prep->steps[st.last_touch].died += st.bytes;
        }
        if (st.bytes > 0) by_offset.erase(st.offset);
        if (stay_of[st.root] == k) stay_of[st.root] = -1;
    };
    auto touch = [&](int k, int i, int s) {
        stays[k].last_touch = i;
        stays[k].touched[s] = here(i, s);
    };
    // Everything touched before must be done before it is overwritten.
    auto check_overwrite = [&](int i, int s, const Stay &old, const std::string &what) {
        for (int q = 0; q < kNumStreams; q++) {
            const Point &pt = old.touched[q];
            if (pt.instr < 0 || pt.instr == i || has_seen(s, pt)) continue;
            fail(where(i), " ", what, " ", name(old.root), ", which instruction ", pt.instr, " (",
                 describe(graph_, p.instructions[pt.instr]), ") uses with no event between them", race(i, pt));
        }
    };
    // A new stay of `r` at [offset, +bytes): what it overlaps is gone.
    auto claim = [&](int i, int s, TensorId r, int64_t offset, int64_t bytes, const std::vector<TensorId> &busy) {
        if (stay_of[r] >= 0) close_stay(stay_of[r]);
        std::vector<int> hit;
        auto it = by_offset.lower_bound(offset);
        if (it != by_offset.begin()) {
            auto prev = std::prev(it);
            if (prev->first + stays[prev->second].bytes > offset) hit.push_back(prev->second);
        }
        for (; bytes > 0 && it != by_offset.end() && it->first < offset + bytes; ++it) hit.push_back(it->second);
        for (int k : hit) {
            const Stay &old = stays[k];
            std::string region = detail::concat("arena [", offset, ", ", offset + bytes, ")");
            TESSERA_CHECK(old.born_at >= 0, where(i), " writes ", name(r), " at ", region, ", over the pinned ",
                          name(old.root), " at [", old.offset, ", ", old.offset + old.bytes,
                          "), which must keep its value all step");
            bool same = old.born_at == i || std::find(busy.begin(), busy.end(), old.root) != busy.end();
            TESSERA_CHECK(!same, where(i), " writes ", name(r), " at ", region, ", over ", name(old.root), " at [",
                          old.offset, ", ", old.offset + old.bytes, "), which the same instruction uses");
            check_overwrite(i, s, old, detail::concat("writes ", name(r), " at ", region, ", over"));
            close_stay(k);
        }
        return open_stay(r, offset, bytes, i);
    };
    auto check_slot = [&](int i, TensorId t, int64_t offset, int64_t bytes, const char *what) {
        TESSERA_CHECK(offset % MemoryPlan::kAlignment == 0, where(i), ": ", what, " ", name(t), " at arena offset ",
                      offset, ", which is not a multiple of ", MemoryPlan::kAlignment);
        TESSERA_CHECK(offset + bytes <= arena, where(i), ": ", what, " ", name(t), " at arena offset ", offset, " (",
                      bytes, " bytes, ending at ", offset + bytes, "), past the arena of ", arena, " bytes");
    };

    // Pinned persistent tensors are in place before the step starts.
    for (TensorId r = 0; r < nt; r++) {
        if (storage_root(graph_, r) != r || !persistent_[r] || host_homed(r) || plan_.offset[r] < 0) continue;
        open_stay(r, plan_.offset[r], graph_.tensor(r).type.bytes(), -1);
    }
    for (TensorId r = 0; r < nt; r++) host_valid[r] = host_homed(r);

    for (size_t ii = 0; ii < p.instructions.size(); ii++) {
        const int i = static_cast<int>(ii);
        const Instruction &in = p.instructions[ii];
        const int s = static_cast<int>(in.stream);
        Prepared::Step &step = prep->steps[ii];
        step.kind = in.kind;
        step.stream = in.stream;
        step.event = in.event;
        seen[s][s]++;
        switch (in.kind) {
        case Kind::EventRecord: event_clock[in.event] = seen[s]; break;
        case Kind::EventWait:
            for (int q = 0; q < kNumStreams; q++) seen[s][q] = std::max(seen[s][q], event_clock[in.event][q]);
            break;
        case Kind::Compute:
        case Kind::Collective: {
            const Node &node = graph_.node(in.node);
            step.call = &node.call;
            step.node = in.node;
            if (in.kind == Kind::Collective) {
                TESSERA_CHECK(comm_ != nullptr, where(i), " is a collective, but the executor has no communicator");
                step.collective = std::make_unique<Collective>(graph_, in.node, comm_->rank(), comm_->size());
                step.on_device = !device_.host_can_address_arena() && device_comm_ != nullptr &&
                                 step.collective->is_all_reduce();
                if (!device_.host_can_address_arena() && !step.on_device) {
                    step.stage_in = device_.allocate_host(static_cast<size_t>(graph_.tensor(node.inputs[0]).type.bytes()));
                    step.stage_out =
                        device_.allocate_host(static_cast<size_t>(graph_.tensor(node.outputs[0]).type.bytes()));
                }
            }
            std::vector<TensorId> in_roots;
            for (TensorId t : node.inputs) {
                TensorId r = storage_root(graph_, t);
                int k = stay_of[r];
                TESSERA_CHECK(k >= 0, where(i), " reads ", name(t), ", which is not in the arena: ",
                              host_homed(r) ? "it is host-homed and no swap-in brings it in before"
                                            : "it was written over, or never produced or swapped in, before");
                const Point &w = stays[k].writer;
                TESSERA_CHECK(has_seen(s, w), where(i), " reads ", name(t), ", which instruction ", w.instr, " (",
                              describe(graph_, p.instructions[w.instr]), ") writes with no event between them",
                              race(i, w));
                step.inputs.push_back({device_.arena() + stays[k].offset, graph_.tensor(t).type});
                step.touch_end = std::max(step.touch_end, stays[k].offset + graph_.tensor(t).type.bytes());
                in_roots.push_back(r);
            }
            std::vector<int> written;
            for (TensorId t : node.outputs) {
                TensorId r = storage_root(graph_, t);
                int64_t bytes = graph_.tensor(t).type.bytes();
                int k = stay_of[r];
                bool pinned = k >= 0 && stays[k].born_at < 0;
                if (r != t || pinned) {
                    // In place: the stay goes on, with new contents.
                    TESSERA_CHECK(k >= 0, where(i), " writes ", name(t), " in place of ", name(r),
                                  ", which is not in the arena");
                    check_overwrite(i, s, stays[k], detail::concat("writes ", name(t), " over"));
                } else {
                    int64_t off = !p.place.empty() && p.place[t] >= 0 ? p.place[t] : plan_.offset[t];
                    TESSERA_CHECK(off >= 0, where(i), " writes ", name(t),
                                  ", which has no storage: neither the program's place nor the memory plan gives "
                                  "it an arena offset");
                    check_slot(i, t, off, bytes, "writes");
                    k = claim(i, s, r, off, bytes, in_roots);
                }
                host_valid[r] = 0;
                last_write[r] = i;
                step.outputs.push_back({device_.arena() + stays[k].offset, graph_.tensor(t).type});
                step.touch_end = std::max(step.touch_end, stays[k].offset + bytes);
                written.push_back(k);
            }
            for (TensorId r : in_roots) touch(stay_of[r], i, s);
            for (int k : written) {
                touch(k, i, s);
                stays[k].writer = here(i, s);
            }
            break;
        }
        case Kind::SwapOut:
        case Kind::SwapIn: {
            const bool out = in.kind == Kind::SwapOut;
            const TensorId r = storage_root(graph_, in.tensor);
            const int64_t bytes = graph_.tensor(r).type.bytes();
            const int64_t h = plan_.host_offset_of(r);
            TESSERA_CHECK(h >= 0, where(i), ": ", name(r),
                          " has no host region in the memory plan (host_offset -1), so it cannot be swapped");
            TESSERA_CHECK(in.bytes == bytes, where(i), ": moves ", in.bytes, " bytes but ", name(r), " (",
                          type_str(graph_.tensor(r).type), ") has ", bytes);
            TESSERA_CHECK(in.host_offset + bytes <= plan_.host_bytes, where(i), ": host offset ", in.host_offset,
                          " (", bytes, " bytes, ending at ", in.host_offset + bytes, ") is past the host area of ",
                          plan_.host_bytes, " bytes");
            TESSERA_CHECK(in.host_offset == h, where(i), ": host offset ", in.host_offset, " is not ", name(r),
                          "'s host region in the memory plan (", h, ")");
            std::byte *host = host_.data() + h;
            if (out) {
                int k = stay_of[r];
                TESSERA_CHECK(k >= 0, where(i), ": ", name(r), " is not in the arena, so there is nothing to swap out");
                TESSERA_CHECK(in.offset < 0 || in.offset == stays[k].offset, where(i), ": expects ", name(r),
                              " at arena offset ", in.offset, " but it is at ", stays[k].offset);
                const Point &w = stays[k].writer;
                TESSERA_CHECK(has_seen(s, w), where(i), " copies ", name(r), ", which instruction ", w.instr, " (",
                              describe(graph_, p.instructions[w.instr]), ") writes with no event between them",
                              race(i, w));
                const Point &rd = host_reader[r];
                TESSERA_CHECK(has_seen(s, rd), where(i), " overwrites the host copy of ", name(r),
                              ", which instruction ", rd.instr, " (", describe(graph_, p.instructions[rd.instr]),
                              ") reads with no event between them", race(i, rd));
                step.src = device_.arena() + stays[k].offset;
                step.dst = host;
                step.touch_end = stays[k].offset + bytes;
                touch(k, i, s);
                host_valid[r] = 1;
                host_writer[r] = here(i, s);
            } else {
                check_slot(i, r, in.offset, bytes, "copies");
                TESSERA_CHECK(host_valid[r], where(i), ": the host region of ", name(r),
                              " does not hold its current value: ",
                              last_write[r] >= 0 ? detail::concat("instruction ", last_write[r],
                                                                  " wrote it after its last swap-out")
                                                 : std::string("it was never swapped out"));
                const Point &w = host_writer[r];
                TESSERA_CHECK(has_seen(s, w), where(i), " reads the host copy of ", name(r), ", which instruction ",
                              w.instr, " (", describe(graph_, p.instructions[w.instr]),
                              ") writes with no event between them", race(i, w));
                int k = claim(i, s, r, in.offset, bytes, {});
                touch(k, i, s);
                stays[k].writer = here(i, s);
                host_reader[r] = here(i, s);
                step.src = host;
                step.dst = device_.arena() + in.offset;
                step.touch_end = in.offset + bytes;
            }
            step.copy_bytes = bytes;
            break;
        }
        }
    }
    for (TensorId r = 0; r < nt; r++) {
        if (stay_of[r] >= 0) close_stay(stay_of[r]);
        TESSERA_CHECK(!host_homed(r) || host_valid[r], "program: the host-homed ", name(r), " is written by instruction ",
                      last_write[r], " (", describe(graph_, p.instructions[last_write[r]]),
                      ") but not swapped out after that, so its new value would be lost at the end of the step; "
                      "swap it out after instruction ", last_write[r]);
    }

    if (cache_.size() == kMaxCachedPrograms) cache_.erase(cache_.begin());
    cache_.push_back(std::move(prep));
    return *cache_.back();
}

StepStats Executor::run(const Program &p) {
    Prepared &prep = prepare(p);
    if (timing_) node_time_.assign(static_cast<size_t>(graph_.num_nodes()), 0.0);

    // A failed step can leave the live count off; between steps exactly the
    // pinned persistent tensors are live.
    MemoryCounters before = device_.counters();
    if (before.live_bytes != persistent_bytes_) device_.add_live_bytes(persistent_bytes_ - before.live_bytes);
    device_.reset_peak();
    before = device_.counters();

    auto comm_total = [&] {
        return (comm_ ? comm_->counters().total() : 0) + (device_comm_ ? device_comm_->counters().total() : 0);
    };
    const int64_t comm_before = comm_total();
    // The counters follow the steps on their streams where host work on a
    // stream is cheap (CPU). Elsewhere (CUDA) each would stall its stream, so
    // the same bookkeeping is replayed on the host after the step, in program
    // order: the high water and the swap bytes are the same numbers; the live
    // peak is that of the program order rather than of the streams' timing.
    const bool on_stream = device_.cheap_stream_host_work();
    auto t0 = std::chrono::steady_clock::now();
    try {
        for (Prepared::Step &st : prep.steps) {
            Stream &s = device_.stream(st.stream);
            switch (st.kind) {
            case Kind::Compute:
                if (on_stream || timing_)
                    s.enqueue([dev = &device_, step = &st, timing = timing_, on_stream] {
                        if (on_stream) {
                            dev->add_live_bytes(step->born);
                            dev->note_arena_use(step->touch_end);
                        }
                        if (timing) step->started = std::chrono::steady_clock::now();
                    });
                device_.launch_op(st.stream, *st.call, st.inputs, st.outputs);
                if (timing_)
                    s.enqueue([step = &st, times = node_time_.data()] {
                        times[step->node] =
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - step->started).count();
                    });
                break;
            case Kind::Collective:
                if (st.on_device) {
                    const size_t n = st.collective->elements();
                    if (st.inputs[0].data != st.outputs[0].data)
                        device_.copy_in_arena_async(st.stream, st.outputs[0].data, st.inputs[0].data, n * 4);
                    TESSERA_CHECK(device_comm_->enqueue_all_reduce(static_cast<float *>(st.outputs[0].data), n,
                                                                   st.collective->group(),
                                                                   device_.native_stream(st.stream)),
                                  "the device communicator (", device_comm_->backend(),
                                  ") cannot all-reduce device memory on a stream; use NCCL, or no device communicator");
                    break;
                }
                if (st.stage_in.data() == nullptr) {
                    s.enqueue([dev = &device_, comm = comm_, step = &st] {
                        dev->add_live_bytes(step->born);
                        dev->note_arena_use(step->touch_end);
                        step->collective->run(*comm, static_cast<const std::byte *>(step->inputs[0].data),
                                              static_cast<std::byte *>(step->outputs[0].data));
                    });
                    break;
                }
                device_.copy_async(st.stream, st.stage_in.data(), st.inputs[0].data, st.stage_in.size(),
                                   CopyDirection::DeviceToHost);
                s.enqueue([dev = &device_, comm = comm_, step = &st, on_stream] {
                    if (on_stream) {
                        dev->add_live_bytes(step->born);
                        dev->note_arena_use(step->touch_end);
                    }
                    step->collective->run(*comm, step->stage_in.data(), step->stage_out.data());
                });
                device_.copy_async(st.stream, st.outputs[0].data, st.stage_out.data(), st.stage_out.size(),
                                   CopyDirection::HostToDevice);
                break;
            case Kind::SwapOut:
            case Kind::SwapIn: {
                bool in = st.kind == Kind::SwapIn;
                if (on_stream)
                    s.enqueue([dev = &device_, step = &st, in] {
                        dev->add_live_bytes(step->born);
                        if (in) dev->add_swap_in_bytes(step->copy_bytes);
                        else dev->add_swap_out_bytes(step->copy_bytes);
                    });
                device_.copy_async(st.stream, st.dst, st.src, static_cast<size_t>(st.copy_bytes),
                                   in ? CopyDirection::HostToDevice : CopyDirection::DeviceToHost);
                break;
            }
            case Kind::EventRecord: s.record(*prep.events[st.event]); break;
            case Kind::EventWait: s.wait(*prep.events[st.event]); break;
            }
            if (st.died && on_stream) s.enqueue([dev = &device_, d = st.died] { dev->add_live_bytes(-d); });
        }
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
    if (!on_stream)
        for (const Prepared::Step &st : prep.steps) {
            device_.add_live_bytes(st.born);
            device_.note_arena_use(st.touch_end);
            if (st.kind == Kind::SwapIn) device_.add_swap_in_bytes(st.copy_bytes);
            if (st.kind == Kind::SwapOut) device_.add_swap_out_bytes(st.copy_bytes);
            device_.add_live_bytes(-st.died);
        }

    MemoryCounters after = device_.counters();
    StepStats stats;
    stats.step_time_s = std::chrono::duration<double>(t1 - t0).count();
    stats.peak_live_bytes = after.peak_live_bytes;
    stats.arena_high_water = after.arena_high_water;
    stats.swap_out_bytes = after.swap_out_bytes - before.swap_out_bytes;
    stats.swap_in_bytes = after.swap_in_bytes - before.swap_in_bytes;
    stats.comm_bytes = after.comm_bytes - before.comm_bytes + comm_total() - comm_before;
    return stats;
}

}  // namespace tessera
