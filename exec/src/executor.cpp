#include "tessera/exec/executor.h"

#include <algorithm>
#include <chrono>

#include "collective.h"
#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/exec/size.h"

namespace tessera {

namespace {

constexpr size_t kMaxCachedPrograms = 8;

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
        int64_t born = 0;       // bytes that become live when the step starts
        int64_t died = 0;       // bytes that die when it ends
        int64_t touch_end = 0;  // the largest offset + size it touches
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
        if (persistent_[t] && storage_root(graph_, t) == t && plan_.offset[t] >= 0)
            persistent_bytes_ += graph_.tensor(t).type.bytes();
}

Executor::~Executor() = default;

int64_t Executor::checked_offset(TensorId t, const char *what) const {
    TESSERA_CHECK(t >= 0 && t < graph_.num_tensors(), what, ": tensor id ", t, " does not exist; the graph has ",
                  graph_.num_tensors(), " tensors");
    int64_t off = plan_.offset[t];
    TESSERA_CHECK(off >= 0, what, ": tensor '", graph_.tensor(t).name,
                  "' has no storage in the memory plan: no node of the plan's order produces it");
    return off;
}

std::byte *Executor::address(TensorId t) { return device_.arena() + checked_offset(t, "address"); }

void Executor::write(TensorId t, const void *host, size_t bytes) {
    int64_t off = checked_offset(t, "write");
    const TensorInfo &info = graph_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "write to '", info.name, "': got ", bytes,
                  " bytes but ", type_str(info.type), " takes ", info.type.bytes(), " bytes");
    device_.copy_to_device(device_.arena() + off, host, bytes);
}

void Executor::read(TensorId t, void *host, size_t bytes) {
    int64_t off = checked_offset(t, "read");
    const TensorInfo &info = graph_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "read of '", info.name, "': asked for ", bytes,
                  " bytes but ", type_str(info.type), " has ", info.type.bytes(), " bytes");
    device_.copy_to_host(host, device_.arena() + off, bytes);
}

void Executor::initialize(uint64_t seed) {
    // Staged in chunks: the host never holds more than one chunk of a tensor,
    // and `first` keeps each element's value independent of the chunking.
    constexpr int64_t kChunk = 1 << 20;
    std::vector<float> staging;
    for (TensorId t = 0; t < graph_.num_tensors(); t++) {
        const TensorInfo &info = graph_.tensor(t);
        if (storage_root(graph_, t) != t || plan_.offset[t] < 0) continue;
        bool data = info.role == TensorRole::Data;
        if (!data && !is_persistent(info.role)) continue;
        Init init = data ? Init::zeros() : info.init;
        TESSERA_CHECK(info.type.dtype == DType::F32 || init.kind == Init::Kind::Zeros, "tensor '", info.name,
                      "' is ", type_str(info.type), " but has initialiser ", init_str(init),
                      "; only f32 tensors can have a non-zero initialiser");
        int64_t n = info.type.elements();
        std::byte *base = device_.arena() + plan_.offset[t];
        for (int64_t first = 0; first < n; first += kChunk) {
            int64_t m = std::min(kChunk, n - first);
            staging.resize(static_cast<size_t>(m));
            // Zeros are zero bits for i32 as well.
            fill_init(init, seed, info.name, info.type.shape, staging.data(), m, first);
            device_.copy_to_device(base + first * 4, staging.data(), static_cast<size_t>(m) * 4);
        }
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

    // The plan's lifetimes hold for its own order and any subsequence of it.
    std::vector<int> plan_pos(graph_.num_nodes(), -1);
    for (size_t i = 0; i < plan_.order.size(); i++) plan_pos[plan_.order[i]] = static_cast<int>(i);
    int last_pos = -1;
    size_t last_instr = 0;
    for (size_t i = 0; i < p.instructions.size(); i++) {
        const Instruction &in = p.instructions[i];
        if (in.kind != Instruction::Kind::Compute && in.kind != Instruction::Kind::Collective) continue;
        const Node &node = graph_.node(in.node);
        TESSERA_CHECK(in.kind == Instruction::Kind::Compute || comm_, "program instruction ", i, " runs the collective '",
                      node.call.name, "', but the executor has no communicator (set_communicator)");
        TESSERA_CHECK(plan_pos[in.node] >= 0, "program instruction ", i, " computes '", node.call.name,
                      "', which is not in the memory plan's order; plan memory for this program's order");
        TESSERA_CHECK(plan_pos[in.node] > last_pos, "program instruction ", i, " computes '", node.call.name,
                      "' after '", graph_.node(p.instructions[last_instr].node).call.name, "' (instruction ",
                      last_instr, "), but the memory plan's order has them the other way round; its tensor "
                      "lifetimes hold only for its own order, so plan memory for this program's order");
        last_pos = plan_pos[in.node];
        last_instr = i;
        for (const auto *list : {&node.inputs, &node.outputs})
            for (TensorId t : *list)
                TESSERA_CHECK(plan_.offset[t] >= 0, "program instruction ", i, " (", node.call.name, ") uses '",
                              graph_.tensor(t).name, "', which has no storage in the memory plan");
    }

    auto prep = std::make_unique<Prepared>();
    prep->program = p;
    prep->steps.resize(p.instructions.size());
    for (int e = 0; e < p.num_events; e++) prep->events.push_back(device_.create_event());

    // A transient storage block is born at the first instruction that writes
    // it and dies after the last one that touches it.
    std::vector<int> first_use(graph_.num_tensors(), -1), last_use(graph_.num_tensors(), -1);
    for (size_t i = 0; i < p.instructions.size(); i++) {
        const Instruction &in = p.instructions[i];
        Prepared::Step &st = prep->steps[i];
        st.kind = in.kind;
        st.stream = in.stream;
        st.event = in.event;
        if (in.kind != Instruction::Kind::Compute && in.kind != Instruction::Kind::Collective) continue;
        const Node &node = graph_.node(in.node);
        st.call = &node.call;
        if (in.kind == Instruction::Kind::Collective)
            st.collective = std::make_unique<Collective>(graph_, in.node, comm_->rank(), comm_->size());
        auto bind = [&](TensorId t, std::vector<TensorRef> &refs, bool writes) {
            const TensorInfo &info = graph_.tensor(t);
            int64_t off = plan_.offset[t];
            refs.push_back({device_.arena() + off, info.type});
            st.touch_end = std::max(st.touch_end, off + info.type.bytes());
            TensorId r = storage_root(graph_, t);
            if (persistent_[r]) return;
            if (writes && first_use[r] < 0) {
                first_use[r] = static_cast<int>(i);
                st.born += graph_.tensor(r).type.bytes();
            }
            last_use[r] = static_cast<int>(i);
        };
        for (TensorId t : node.inputs) bind(t, st.inputs, false);
        for (TensorId t : node.outputs) bind(t, st.outputs, true);
    }
    for (TensorId r = 0; r < graph_.num_tensors(); r++)
        if (first_use[r] >= 0) prep->steps[last_use[r]].died += graph_.tensor(r).type.bytes();

    if (cache_.size() == kMaxCachedPrograms) cache_.erase(cache_.begin());
    cache_.push_back(std::move(prep));
    return *cache_.back();
}

StepStats Executor::run(const Program &p) {
    Prepared &prep = prepare(p);

    // A failed step can leave the live count off; between steps exactly the
    // persistent tensors are live.
    MemoryCounters before = device_.counters();
    if (before.live_bytes != persistent_bytes_) device_.add_live_bytes(persistent_bytes_ - before.live_bytes);
    device_.reset_peak();
    before = device_.counters();

    const int64_t comm_before = comm_ ? comm_->counters().total() : 0;
    auto t0 = std::chrono::steady_clock::now();
    try {
        for (Prepared::Step &st : prep.steps) {
            Stream &s = device_.stream(st.stream);
            switch (st.kind) {
            case Instruction::Kind::Compute:
                s.enqueue([dev = &device_, step = &st] {
                    dev->add_live_bytes(step->born);
                    dev->note_arena_use(step->touch_end);
                });
                device_.launch_op(st.stream, *st.call, st.inputs, st.outputs);
                if (st.died) s.enqueue([dev = &device_, d = st.died] { dev->add_live_bytes(-d); });
                break;
            case Instruction::Kind::Collective:
                s.enqueue([dev = &device_, comm = comm_, step = &st] {
                    dev->add_live_bytes(step->born);
                    dev->note_arena_use(step->touch_end);
                    step->collective->run(*comm, static_cast<const std::byte *>(step->inputs[0].data),
                                          static_cast<std::byte *>(step->outputs[0].data));
                });
                if (st.died) s.enqueue([dev = &device_, d = st.died] { dev->add_live_bytes(-d); });
                break;
            case Instruction::Kind::EventRecord: s.record(*prep.events[st.event]); break;
            case Instruction::Kind::EventWait: s.wait(*prep.events[st.event]); break;
            default: TESSERA_INTERNAL_ASSERT(false, "check_program let a ", instruction_kind_name(st.kind),
                                             " instruction through");
            }
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

    MemoryCounters after = device_.counters();
    StepStats stats;
    stats.step_time_s = std::chrono::duration<double>(t1 - t0).count();
    stats.peak_live_bytes = after.peak_live_bytes;
    stats.arena_high_water = after.arena_high_water;
    stats.swap_out_bytes = after.swap_out_bytes - before.swap_out_bytes;
    stats.swap_in_bytes = after.swap_in_bytes - before.swap_in_bytes;
    stats.comm_bytes = after.comm_bytes - before.comm_bytes + (comm_ ? comm_->counters().total() - comm_before : 0);
    return stats;
}

}  // namespace tessera
