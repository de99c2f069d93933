#include "tessera/program/verify.h"

#include <algorithm>
#include <array>
#include <map>

#include "tessera/error.h"

namespace tessera {

namespace {

using Kind = Instruction::Kind;
using Clock = std::array<int64_t, kNumStreams>;

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
    bool stale = false;                        // a host-side update has replaced the value
    Point writer;                              // the latest write
    std::array<Point, kNumStreams> touched{};  // per stream, the latest touch
};

class Replay {
public:
    Replay(const Graph &g, const Program &p, const MemoryPlan &plan, const VerifyNames &names)
        : g_(g), p_(p), plan_(plan), names_(names), persistent_(persistent_tensors(g)),
          view_writer_(g.num_tensors(), -1),
          out_(p.instructions.size()), stay_of_(g.num_tensors(), -1), host_valid_(g.num_tensors(), 0),
          host_writer_(g.num_tensors()), host_reader_(g.num_tensors()), last_write_(g.num_tensors(), -1),
          event_clock_(p.num_events) {}

    std::vector<VerifiedInstruction> run();

private:
    TensorId root_of(TensorId t) const { return roots_[t]; }
    bool host_homed(TensorId r) const { return persistent_[r] && plan_.host_offset_of(r) >= 0; }
    std::string name(TensorId t) const { return "'" + g_.tensor(t).name + "'"; }
    std::string label(int i) const;
    std::string named(int i) const { return label(i) + " (" + describe_instruction(g_, p_.instructions[i]) + ")"; }
    std::string where(int i) const;
    // What orders two instructions: an event between them, or a step's wait.
    const char *between() const { return names_.step_of.empty() ? "event between" : "wait between"; }
    std::string race(int i, const Point &other) const;
    bool has_seen(int s, const Point &pt) const { return pt.instr < 0 || seen_[s][pt.stream] >= pt.tick; }
    Point here(int i, int s) const { return Point{i, s, seen_[s][s]}; }

    void check_order() const;
    int open_stay(TensorId r, int64_t offset, int64_t bytes, int born_at);
    void close_stay(int k);
    void touch(int k, int i, int s);
    void check_overwrite(int i, int s, const Stay &old, const std::string &what) const;
    // `busy`: the instruction's operands, which it must not write over, but
    // for `over`, an input its element-wise output may overwrite exactly.
    int claim(int i, int s, TensorId r, int64_t offset, int64_t bytes, const std::vector<TensorId> &busy,
              TensorId over = kNoTensor);
    void check_slot(int i, TensorId t, int64_t offset, int64_t bytes, const char *what) const;
    void check_written(int i, int s, const Point &writer, TensorId r, const char *verb, const char *what) const;
    void compute(int i, int s);
    void host_compute(int i, int s);
    void check_fresh(int i, int k, const char *verb) const;
    void check_view(int i, TensorId t, int k) const;
    int compute_output(int i, int s, TensorId t, const std::vector<TensorId> &in_roots);
    TensorId overwritable_input(int i, int64_t off) const;
    void swap_out(int i, int s);
    void swap_in(int i, int s);
    void check_swap(int i, TensorId r) const;

    const Graph &g_;
    const Program &p_;
    const MemoryPlan &plan_;
    const VerifyNames &names_;
    const std::vector<bool> persistent_;
    std::vector<TensorId> roots_;  // storage roots under the plan: in-place updates and views
    // Per view: the latest write of its root when the view was made (the
    // instruction, -1: before the step); it holds its value until the next.
    std::vector<int> view_writer_;
    std::vector<VerifiedInstruction> out_;
    std::vector<Stay> stays_;
    std::vector<int> stay_of_;     // per root: its current stay, -1 when not in the arena
    std::map<int64_t, int> by_offset_;  // the stays with bytes, by offset; they never overlap
    std::vector<char> host_valid_;      // per root: the host region holds its current value
    std::vector<Point> host_writer_, host_reader_;
    std::vector<int> last_write_;
    std::array<Clock, kNumStreams> seen_{};
    std::vector<Clock> event_clock_;
};

// "instruction 7", or "step 3" when the program names its steps.
std::string Replay::label(int i) const {
    if (names_.step_of.empty()) return "instruction " + std::to_string(i);
    return "step " + std::to_string(names_.step_of[i]);
}

std::string Replay::where(int i) const {
    return names_.source + (names_.step_of.empty() ? " " : ": ") + named(i);
}

std::string Replay::race(int i, const Point &other) const {
    if (names_.step_of.empty())
        return detail::concat(": the two would race. Record an event after instruction ", other.instr,
                              " and wait for it on the ", stream_name(p_.instructions[i].stream),
                              " stream before instruction ", i);
    return detail::concat(": the two would race. Make step ", names_.step_of[i], " wait for step ",
                          names_.step_of[other.instr]);
}

void Replay::check_order() const {
    std::vector<int> plan_pos(g_.num_nodes(), -1);
    for (size_t i = 0; i < plan_.order.size(); i++) plan_pos[plan_.order[i]] = static_cast<int>(i);
    int last_pos = -1;
    size_t last_instr = 0;
    for (size_t i = 0; i < p_.instructions.size(); i++) {
        const Instruction &in = p_.instructions[i];
        if (in.kind != Kind::Compute && in.kind != Kind::Collective) continue;
        const Node &node = g_.node(in.node);
        TESSERA_CHECK(plan_pos[in.node] >= 0, names_.source, " instruction ", i, " computes '", node.call.name,
                      "', which is not in the memory plan's order; plan memory for this program's order");
        TESSERA_CHECK(plan_pos[in.node] > last_pos, names_.source, " instruction ", i, " computes '", node.call.name,
                      "' after '", g_.node(p_.instructions[last_instr].node).call.name, "' (instruction ",
                      last_instr, "), but the memory plan's order has them the other way round; its tensor "
                      "lifetimes hold only for its own order, so plan memory for this program's order");
        last_pos = plan_pos[in.node];
        last_instr = i;
    }
}

int Replay::open_stay(TensorId r, int64_t offset, int64_t bytes, int born_at) {
    stays_.push_back(Stay{r, offset, bytes, born_at, born_at, false, Point{}, {}});
    int k = static_cast<int>(stays_.size()) - 1;
    stay_of_[r] = k;
    if (bytes > 0) by_offset_[offset] = k;
    return k;
}

void Replay::close_stay(int k) {
    Stay &st = stays_[k];
    if (st.born_at >= 0) {
        out_[st.born_at].born += st.bytes;
        out_[st.last_touch].died += st.bytes;
    }
    if (st.bytes > 0) by_offset_.erase(st.offset);
    if (stay_of_[st.root] == k) stay_of_[st.root] = -1;
}

void Replay::touch(int k, int i, int s) {
    stays_[k].last_touch = i;
    stays_[k].touched[s] = here(i, s);
}

// Everything that touched `old` must be done before it is overwritten.
void Replay::check_overwrite(int i, int s, const Stay &old, const std::string &what) const {
    for (int q = 0; q < kNumStreams; q++) {
        const Point &pt = old.touched[q];
        if (pt.instr < 0 || pt.instr == i || has_seen(s, pt)) continue;
        fail(where(i), " ", what, " ", name(old.root), ", which ", named(pt.instr),
             " uses with no ", between(), " them", race(i, pt));
    }
}

// A new stay of `r` at [offset, +bytes): what it overlaps is gone.
int Replay::claim(int i, int s, TensorId r, int64_t offset, int64_t bytes, const std::vector<TensorId> &busy,
                  TensorId over) {
    if (stay_of_[r] >= 0) close_stay(stay_of_[r]);
    std::vector<int> hit;
    auto it = by_offset_.lower_bound(offset);
    if (it != by_offset_.begin()) {
        auto prev = std::prev(it);
        if (prev->first + stays_[prev->second].bytes > offset) hit.push_back(prev->second);
    }
    for (; bytes > 0 && it != by_offset_.end() && it->first < offset + bytes; ++it) hit.push_back(it->second);
    for (int k : hit) {
        const Stay &old = stays_[k];
        std::string region = detail::concat("arena [", offset, ", ", offset + bytes, ")");
        TESSERA_CHECK(old.born_at >= 0, where(i), " writes ", name(r), " at ", region, ", over the pinned ",
                      name(old.root), " at [", old.offset, ", ", old.offset + old.bytes,
                      "), which must keep its value all step");
        const bool exact = old.root == over && old.offset == offset && old.bytes == bytes;
        bool same = old.born_at == i || (!exact && std::find(busy.begin(), busy.end(), old.root) != busy.end());
        TESSERA_CHECK(!same, where(i), " writes ", name(r), " at ", region, ", over ", name(old.root), " at [",
                      old.offset, ", ", old.offset + old.bytes, "), which the same instruction uses");
        check_overwrite(i, s, old, detail::concat("writes ", name(r), " at ", region, ", over"));
        close_stay(k);
    }
    return open_stay(r, offset, bytes, i);
}

void Replay::check_slot(int i, TensorId t, int64_t offset, int64_t bytes, const char *what) const {
    TESSERA_CHECK(offset % MemoryPlan::kAlignment == 0, where(i), ": ", what, " ", name(t), " at arena offset ",
                  offset, ", which is not a multiple of ", MemoryPlan::kAlignment);
    TESSERA_CHECK(offset + bytes <= plan_.arena_bytes, where(i), ": ", what, " ", name(t), " at arena offset ", offset,
                  " (", bytes, " bytes, ending at ", offset + bytes, "), past the arena of ", plan_.arena_bytes,
                  " bytes");
}

// `verb` `r`'s bytes, which `writer` wrote: only once the writer is done.
void Replay::check_written(int i, int s, const Point &writer, TensorId r, const char *verb, const char *what) const {
    TESSERA_CHECK(has_seen(s, writer), where(i), " ", verb, " ", what, name(r), ", which ",
                  named(writer.instr), " writes with no ", between(), " them", race(i, writer));
}

// The input that instruction i's output, at arena offset `off`, may write
// over (op_may_overwrite_input): the one that lives exactly there; kNoTensor
// when none does.
TensorId Replay::overwritable_input(int i, int64_t off) const {
    const Node &node = g_.node(p_.instructions[i].node);
    if (node.comm || node.outputs.size() != 1) return kNoTensor;
    for (size_t k = 0; k < node.inputs.size(); k++) {
        const TensorId r = root_of(node.inputs[k]);
        if (!op_may_overwrite_input(node.call.kind, static_cast<int>(k)) || stay_of_[r] < 0) continue;
        if (stays_[stay_of_[r]].offset == off) return r;
    }
    return kNoTensor;
}

// An output of a compute instruction: in place (the stay goes on, with new
// contents) or a new stay where the program or the plan places it.
int Replay::compute_output(int i, int s, TensorId t, const std::vector<TensorId> &in_roots) {
    TensorId r = root_of(t);
    int k = stay_of_[r];
    bool pinned = k >= 0 && stays_[k].born_at < 0;
    if (r != t || pinned) {
        TESSERA_CHECK(k >= 0, where(i), " writes ", name(t), " in place of ", name(r), ", which is not in the arena");
        check_overwrite(i, s, stays_[k], detail::concat("writes ", name(t), " over"));
        return k;
    }
    const int64_t again = p_.instructions[i].offset;  // a recomputation's own offset
    int64_t off = again >= 0 ? again : !p_.place.empty() && p_.place[t] >= 0 ? p_.place[t] : plan_.offset[t];
    TESSERA_CHECK(off >= 0, where(i), " writes ", name(t),
                  ", which has no storage: neither the program's place nor the memory plan gives it an arena offset");
    int64_t bytes = g_.tensor(t).type.bytes();
    check_slot(i, t, off, bytes, "writes");
    return claim(i, s, r, off, bytes, in_roots, overwritable_input(i, off));
}

void Replay::compute(int i, int s) {
    const Node &node = g_.node(p_.instructions[i].node);
    VerifiedInstruction &v = out_[i];
    std::vector<TensorId> in_roots;
    for (TensorId t : node.inputs) {
        TensorId r = root_of(t);
        int k = stay_of_[r];
        TESSERA_CHECK(k >= 0, where(i), " reads ", name(t), ", which is not in the arena: ",
                      host_homed(r) ? "it is host-homed and no swap-in brings it in before"
                                    : "it was written over, or never produced or swapped in, before");
        check_fresh(i, k, "reads");
        check_written(i, s, stays_[k].writer, t, "reads", "");
        if (plan_.is_view(t)) check_view(i, t, k);
        v.inputs.push_back(stays_[k].offset);
        v.touch_end = std::max(v.touch_end, stays_[k].offset + g_.tensor(t).type.bytes());
        in_roots.push_back(r);
    }
    std::vector<int> written;
    for (TensorId t : node.outputs) {
        if (plan_.is_view(t)) {
            // A reshape that is a view runs nothing: its output is its input's bytes.
            TESSERA_CHECK(p_.instructions[i].offset < 0, where(i), ": recomputes ", name(t),
                          ", which the memory plan makes a view of ", name(plan_.view_of[t]),
                          "; only a reshape that copies can be recomputed");
            int k = stay_of_[root_of(t)];
            TESSERA_INTERNAL_ASSERT(k >= 0, "the view ", name(t), " has a root that is not in the arena, though ",
                                    "its input was just read");
            view_writer_[t] = stays_[k].writer.instr;
            v.outputs.push_back(stays_[k].offset);
            v.touch_end = std::max(v.touch_end, stays_[k].offset + g_.tensor(t).type.bytes());
            v.view = true;
            continue;
        }
        int k = compute_output(i, s, t, in_roots);
        TensorId r = root_of(t);
        host_valid_[r] = 0;
        last_write_[r] = i;
        v.outputs.push_back(stays_[k].offset);
        v.touch_end = std::max(v.touch_end, stays_[k].offset + g_.tensor(t).type.bytes());
        written.push_back(k);
    }
    for (TensorId r : in_roots)
        if (stay_of_[r] >= 0) touch(stay_of_[r], i, s);  // else an output wrote over it
    for (int k : written) {
        touch(k, i, s);
        stays_[k].writer = here(i, s);
    }
}

// A view (stay k) still holds the value its reshape saw: nothing has written
// its root since. Only an in-place update could, and plan_memory makes no
// view that one would change; a hand-made plan or program might.
void Replay::check_view(int i, TensorId t, int k) const {
    const Point &w = stays_[k].writer;
    if (w.instr == view_writer_[t]) return;
    fail(where(i), " reads ", name(t), ", which the memory plan makes a view of ", name(plan_.view_of[t]),
         ", but ", w.instr >= 0 ? named(w.instr) : std::string("a move of the tensor"), " has written over ",
         name(root_of(t)), " since the view was made; the reshape must copy (plan memory without that view)");
}

// A stay that a host-side update made stale holds an old value.
void Replay::check_fresh(int i, int k, const char *verb) const {
    const Stay &st = stays_[k];
    TESSERA_CHECK(!st.stale, where(i), " ", verb, " the arena copy of ", name(st.root), ", which ",
                  named(last_write_[st.root]), " has replaced in host memory; swap it in again first");
}

// An operator on the host stream: it reads and updates host regions. Each
// must hold its operand's current value (swapped out, or host-homed and not
// written since), and no swap may be using them meanwhile. What it writes
// is in place (a host-side optimizer update), so the arena copy, if any, is
// out of date from then on.
void Replay::host_compute(int i, int s) {
    const Node &node = g_.node(p_.instructions[i].node);
    VerifiedInstruction &v = out_[i];
    auto region = [&](TensorId t) {
        TESSERA_CHECK(!plan_.is_view(t), where(i), " runs on the host but ", name(t),
                      " is a view in the memory plan; the host stream works on storage roots only");
        TensorId r = root_of(t);
        int64_t h = plan_.host_offset_of(r);
        TESSERA_CHECK(h >= 0, where(i), " runs on the host but ", name(r),
                      " has no host region in the memory plan (host_offset -1)");
        return std::pair{r, h};
    };
    for (TensorId t : node.inputs) {
        auto [r, h] = region(t);
        TESSERA_CHECK(host_valid_[r], where(i), " reads the host copy of ", name(t),
                      ", which does not hold its current value: swap it out first");
        check_written(i, s, host_writer_[r], r, "reads", "the host copy of ");
        v.inputs.push_back(h);
    }
    for (TensorId t : node.outputs) {
        auto [r, h] = region(t);
        TESSERA_CHECK(r != t, where(i), " runs on the host but writes ", name(t),
                      ", which is not in place of a tensor; the host stream only updates tensors in place");
        check_written(i, s, host_reader_[r], r, "overwrites", "the host copy of ");
        if (stay_of_[r] >= 0) stays_[stay_of_[r]].stale = true;
        v.outputs.push_back(h);
    }
    for (TensorId t : node.inputs) host_reader_[root_of(t)] = here(i, s);
    for (TensorId t : node.outputs) {
        TensorId r = root_of(t);
        host_valid_[r] = 1;
        host_writer_[r] = here(i, s);
        last_write_[r] = i;
    }
}

// What a swap of root `r` must agree on with the memory plan.
void Replay::check_swap(int i, TensorId r) const {
    const Instruction &in = p_.instructions[i];
    const int64_t bytes = g_.tensor(r).type.bytes();
    const int64_t h = plan_.host_offset_of(r);
    TESSERA_CHECK(h >= 0, where(i), ": ", name(r),
                  " has no host region in the memory plan (host_offset -1), so it cannot be swapped");
    TESSERA_CHECK(in.bytes == bytes, where(i), ": moves ", in.bytes, " bytes but ", name(r), " (",
                  type_str(g_.tensor(r).type), ") has ", bytes);
    TESSERA_CHECK(in.host_offset + bytes <= plan_.host_bytes, where(i), ": host offset ", in.host_offset, " (", bytes,
                  " bytes, ending at ", in.host_offset + bytes, ") is past the host area of ", plan_.host_bytes,
                  " bytes");
    TESSERA_CHECK(in.host_offset == h, where(i), ": host offset ", in.host_offset, " is not ", name(r),
                  "'s host region in the memory plan (", h, ")");
}

void Replay::swap_out(int i, int s) {
    const Instruction &in = p_.instructions[i];
    const TensorId r = root_of(in.tensor);
    check_swap(i, r);
    int k = stay_of_[r];
    TESSERA_CHECK(k >= 0, where(i), ": ", name(r), " is not in the arena, so there is nothing to swap out");
    TESSERA_CHECK(in.offset < 0 || in.offset == stays_[k].offset, where(i), ": expects ", name(r), " at arena offset ",
                  in.offset, " but it is at ", stays_[k].offset);
    check_fresh(i, k, "copies");
    check_written(i, s, stays_[k].writer, r, "copies", "");
    check_written(i, s, host_reader_[r], r, "overwrites", "the host copy of ");
    VerifiedInstruction &v = out_[i];
    v.arena_offset = stays_[k].offset;
    v.host_offset = in.host_offset;
    v.bytes = in.bytes;
    v.touch_end = stays_[k].offset + in.bytes;
    touch(k, i, s);
    host_valid_[r] = 1;
    host_writer_[r] = here(i, s);
}

void Replay::swap_in(int i, int s) {
    const Instruction &in = p_.instructions[i];
    const TensorId r = root_of(in.tensor);
    check_swap(i, r);
    check_slot(i, r, in.offset, in.bytes, "copies");
    TESSERA_CHECK(host_valid_[r], where(i), ": the host region of ", name(r), " does not hold its current value: ",
                  last_write_[r] >= 0
                      ? label(last_write_[r]) + " wrote it after its last swap-out"
                      : std::string("it was never swapped out"));
    check_written(i, s, host_writer_[r], r, "reads", "the host copy of ");
    int k = claim(i, s, r, in.offset, in.bytes, {});
    touch(k, i, s);
    stays_[k].writer = here(i, s);
    host_reader_[r] = here(i, s);
    VerifiedInstruction &v = out_[i];
    v.arena_offset = in.offset;
    v.host_offset = in.host_offset;
    v.bytes = in.bytes;
    v.touch_end = in.offset + in.bytes;
}

std::vector<VerifiedInstruction> Replay::run() {
    check_program(g_, p_);
    // Views are followed to their roots below, so they must be sound first.
    if (!plan_.view_of.empty()) check_memory_plan(g_, plan_);
    roots_ = storage_roots(g_, plan_);
    TESSERA_CHECK(names_.step_of.empty() || names_.step_of.size() == p_.instructions.size(), names_.source,
                  ": step_of has ", names_.step_of.size(), " entries for ", p_.instructions.size(), " instructions");
    if (p_.place.empty()) check_order();
    const int nt = g_.num_tensors();
    // Pinned persistent tensors are in place before the step starts.
    for (TensorId r = 0; r < nt; r++) {
        if (root_of(r) != r || !persistent_[r] || host_homed(r) || plan_.offset[r] < 0) continue;
        open_stay(r, plan_.offset[r], g_.tensor(r).type.bytes(), -1);
    }
    for (TensorId r = 0; r < nt; r++) host_valid_[r] = host_homed(r);

    for (int i = 0; i < static_cast<int>(p_.instructions.size()); i++) {
        const Instruction &in = p_.instructions[i];
        const int s = static_cast<int>(in.stream);
        seen_[s][s]++;
        switch (in.kind) {
        case Kind::EventRecord: event_clock_[in.event] = seen_[s]; break;
        case Kind::EventWait:
            for (int q = 0; q < kNumStreams; q++) seen_[s][q] = std::max(seen_[s][q], event_clock_[in.event][q]);
            break;
        case Kind::Compute:
            if (in.stream == StreamKind::Host) host_compute(i, s);
            else compute(i, s);
            break;
        case Kind::Collective: compute(i, s); break;
        case Kind::SwapOut: swap_out(i, s); break;
        case Kind::SwapIn: swap_in(i, s); break;
        }
    }
    for (TensorId r = 0; r < nt; r++) {
        if (stay_of_[r] >= 0) close_stay(stay_of_[r]);
        TESSERA_CHECK(!host_homed(r) || host_valid_[r], names_.source, ": the host-homed ", name(r), " is written by ",
                      named(last_write_[r]),
                      " but not swapped out after that, so its new value would be lost at the end of the step; "
                      "swap it out after ", label(last_write_[r]));
    }
    return std::move(out_);
}

}  // namespace

std::vector<VerifiedInstruction> verify_program(const Graph &g, const Program &p, const MemoryPlan &plan,
                                                const VerifyNames &names) {
    return Replay(g, p, plan, names).run();
}

}  // namespace tessera
