// The whole-step simulator (tessera/sim/step_sim.h).
//
// Event-driven over all ranks at once: every stream of every rank advances as
// far as it can (an instruction runs once its stream is free and what it waits
// for has happened), again and again until nothing moves. A collective is
// where ranks meet: a member's comm stream that reaches it records its arrival
// and stops; the member that completes the group computes the collective's
// times for every member and moves all their streams on. Streams that are not
// done when nothing moves any more are a deadlock.
//
// Collectives are matched across ranks by node name and group: lowering names
// communication nodes "comm<i>:<why>" with one counter that every rank advances
// identically (partition/src/lower.cpp), and a sub-group collective has the
// same name on every rank but a different group on ranks of different groups.
#include "tessera/sim/step_sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "tessera/error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/partition/lower.h"

namespace tessera {
namespace {

constexpr double kNotYet = -1;

// One communication node as all its members run it.
struct SimCollective {
    std::string name;
    CommNodeKind kind = CommNodeKind::AllReduce;
    std::vector<int> members;       // world ranks, in the node's group order
    std::vector<int> instruction;   // per member: its instruction (-1: it has none)
    std::vector<CommAttrs> attrs;   // per member
    std::vector<int64_t> elem;      // per member: the element size of its buffers
    std::vector<double> arrival;    // per member: when its stream reached it
    int arrived = 0;
};

struct SimStream {
    std::vector<int> list;  // instruction indices, in list order
    size_t next = 0;
    double free_s = 0;
};

struct SimRank {
    const Graph *g = nullptr;
    const Program *p = nullptr;
    const std::vector<double> *node_s = nullptr;
    const std::vector<double> *host_node_s = nullptr;  // empty: node_s
    const std::vector<double> *wait_s = nullptr;  // empty: no hand-offs
    const std::vector<double> *transfer_s = nullptr;  // empty: the link and host-link models
    const std::vector<double> *gap_s = nullptr;       // empty: none measured
    std::array<SimStream, kNumStreams> streams;
    std::vector<int> record_of;   // per instruction: for a wait, the record it waits for
    std::vector<int> collective;  // per instruction: for a collective, its SimCollective
    std::vector<char> done;
    std::vector<InstructionTime> times;
    std::vector<double> arrived;  // per collective instruction: when its stream reached it
};

struct Sim {
    const StepSimOptions &opt;
    std::vector<SimRank> ranks;
    std::vector<SimCollective> collectives;
    // Per rank, per instruction: how much longer than its work a compute or
    // swap instruction takes, sharing the rank's cores (1: alone).
    std::vector<std::vector<double>> stretch;
};

std::string ranks_str(const std::vector<int> &ranks) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < ranks.size(); i++) os << (i ? "," : "") << ranks[i];
    os << "]";
    return os.str();
}

void check_inputs(const std::vector<RankProgram> &ranks, const StepSimOptions &opt) {
    const int n = static_cast<int>(ranks.size());
    TESSERA_CHECK(n > 0, "step simulator: no ranks were given");
    TESSERA_CHECK(opt.machine.devices() == n, "step simulator: the machine ", machine_str(opt.machine), " has ",
                  opt.machine.devices(), " devices, but ", n, " ranks' programs were given");
    TESSERA_CHECK(opt.instruction_overhead_s >= 0, "step simulator: the instruction overhead is negative (",
                  opt.instruction_overhead_s, " s)");
    TESSERA_CHECK(opt.batch >= 0, "step simulator: the batch is negative (", opt.batch, ")");
    for (int r = 0; r < n; r++) {
        const RankProgram &rp = ranks[r];
        TESSERA_CHECK(rp.graph && rp.program, "step simulator: rank ", r, " has no ",
                      rp.graph ? "program" : "graph");
        TESSERA_CHECK(static_cast<int>(rp.node_s.size()) == rp.graph->num_nodes(), "step simulator: rank ", r,
                      " was given ", rp.node_s.size(), " node times, but its graph has ", rp.graph->num_nodes(),
                      " nodes (one time per NodeId)");
        for (NodeId i = 0; i < rp.graph->num_nodes(); i++)
            TESSERA_CHECK(rp.node_s[i] >= 0 && std::isfinite(rp.node_s[i]), "step simulator: rank ", r,
                          ": node '", rp.graph->node(i).call.name, "' has time ", rp.node_s[i],
                          " s; times must be finite and not negative");
        TESSERA_CHECK(rp.host_node_s.empty() || rp.host_node_s.size() == rp.node_s.size(), "step simulator: rank ", r,
                      " was given ", rp.host_node_s.size(), " host node times for ", rp.node_s.size(),
                      " nodes (one per NodeId, or none)");
        const size_t n = rp.program->instructions.size();
        TESSERA_CHECK(rp.wait_s.empty() || rp.wait_s.size() == n, "step simulator: rank ", r, " was given ",
                      rp.wait_s.size(), " hand-off times, but its program has ", n, " instructions (one each, or none)");
        for (double w : rp.wait_s)
            TESSERA_CHECK(w >= 0 && std::isfinite(w), "step simulator: rank ", r, " has a hand-off time of ", w,
                          " s; times must be finite and not negative");
        TESSERA_CHECK(rp.transfer_s.empty() || rp.transfer_s.size() == n, "step simulator: rank ", r,
                      " was given ", rp.transfer_s.size(), " transfer times, but its program has ", n,
                      " instructions (one each, or none)");
        TESSERA_CHECK(rp.gap_s.empty() || rp.gap_s.size() == n, "step simulator: rank ", r, " was given ",
                      rp.gap_s.size(), " gap times, but its program has ", n, " instructions (one each, or none)");
        for (double g : rp.gap_s)
            TESSERA_CHECK(g >= 0 && std::isfinite(g), "step simulator: rank ", r, " has a gap time of ", g,
                          " s; times must be finite and not negative");
        for (double c : rp.transfer_s)
            TESSERA_CHECK(c >= 0 && std::isfinite(c), "step simulator: rank ", r, " has a transfer time of ", c,
                          " s; times must be finite and not negative");
        check_program(*rp.graph, *rp.program);
    }
}

// The measured time rank r's stream took to get to instruction i (0 when none).
double gap_seconds(const SimRank &rk, int i) { return rk.gap_s->empty() ? 0.0 : (*rk.gap_s)[i]; }

// Seconds a compute or swap instruction takes: its work and the fixed
// overhead, stretched by core sharing, and its measured gap (whose waiting
// for a core is measured already).
double work_seconds(const Sim &sim, int r, int i) {
    const SimRank &rk = sim.ranks[r];
    const Instruction &in = rk.p->instructions[i];
    const double overhead = sim.opt.instruction_overhead_s;
    const double stretch = sim.stretch.empty() ? 1.0 : sim.stretch[r][i];
    const double gap = gap_seconds(rk, i);
    if (in.kind == Instruction::Kind::Compute) {
        const bool host = in.stream == StreamKind::Host && !rk.host_node_s->empty();
        return ((host ? *rk.host_node_s : *rk.node_s)[in.node] + overhead) * stretch + gap;
    }
    if (!rk.transfer_s->empty() && (*rk.transfer_s)[i] > 0) return ((*rk.transfer_s)[i] + overhead) * stretch + gap;
    const bool out = in.kind == Instruction::Kind::SwapOut;
    const double bw = out ? sim.opt.swap_out_bandwidth : sim.opt.swap_in_bandwidth;
    if (in.bytes == 0) return overhead + gap;
    TESSERA_CHECK(bw > 0, "step simulator: rank ", r, " instruction ", i, " (", describe_instruction(*rk.g, in),
                  ") moves ", in.bytes, " bytes, but the ", out ? "swap-out (device to host)" : "swap-in (host to device)",
                  " bandwidth is ", bw, " bytes/s");
    return (static_cast<double>(in.bytes) / bw + overhead) * stretch + gap;
}

SimRank make_rank(const RankProgram &rp) {
    SimRank rk;
    rk.g = rp.graph;
    rk.p = rp.program;
    rk.node_s = &rp.node_s;
    rk.host_node_s = &rp.host_node_s;
    rk.wait_s = &rp.wait_s;
    rk.transfer_s = &rp.transfer_s;
    rk.gap_s = &rp.gap_s;
    const size_t n = rp.program->instructions.size();
    rk.record_of.assign(n, -1);
    rk.collective.assign(n, -1);
    rk.done.assign(n, 0);
    rk.times.assign(n, {});
    rk.arrived.assign(n, 0);
    std::vector<int> latest(rp.program->num_events, -1);  // per event: its latest record so far
    for (size_t i = 0; i < n; i++) {
        const Instruction &in = rp.program->instructions[i];
        rk.streams[static_cast<int>(in.stream)].list.push_back(static_cast<int>(i));
        if (in.kind == Instruction::Kind::EventRecord) latest[in.event] = static_cast<int>(i);
        if (in.kind == Instruction::Kind::EventWait) rk.record_of[i] = latest[in.event];
    }
    return rk;
}

// The members of rank r's communication node: its group, or every rank for a
// redistribution.
std::vector<int> collective_members(const CommAttrs &a, int r, int world, const std::string &name) {
    std::vector<int> members = a.ranks;
    if (a.kind == CommNodeKind::Redistribute) {
        TESSERA_CHECK(a.world == world, "step simulator: communication node '", name, "' on rank ", r,
                      " was lowered for ", a.world, " ranks, but ", world, " were given");
        members.resize(world);
        for (int i = 0; i < world; i++) members[i] = i;
    }
    TESSERA_CHECK(std::find(members.begin(), members.end(), r) != members.end(), "step simulator: communication node '",
                  name, "' on rank ", r, " has the group ", ranks_str(members), ", which does not hold rank ", r);
    for (int m : members)
        TESSERA_CHECK(m >= 0 && m < world, "step simulator: communication node '", name, "' on rank ", r,
                      " names rank ", m, ", but the job has ", world, " ranks");
    return members;
}

// Adds rank r's collective instruction i to its SimCollective, made on first sight.
void add_member(Sim &sim, std::map<std::string, int> &index, int r, int i) {
    SimRank &rk = sim.ranks[r];
    const Node &node = rk.g->node(rk.p->instructions[i].node);
    TESSERA_CHECK(node.comm && !node.inputs.empty(), "step simulator: rank ", r, " instruction ", i,
                  " runs node '", node.call.name, "' as a collective, but it is not a communication node");
    const TensorType &type = rk.g->tensor(node.inputs[0]).type;
    const CommAttrs a = read_comm_attrs(node.call, static_cast<int>(type.shape.size()));
    const int world = static_cast<int>(sim.ranks.size());
    // A redistribution spans every rank: its members and its key are made
    // once, not once per rank (O(N^2) at 1024 ranks).
    const bool everyone = a.kind == CommNodeKind::Redistribute;
    std::vector<int> members;
    if (everyone) TESSERA_CHECK(a.world == world, "step simulator: communication node '", node.call.name, "' on rank ",
                                r, " was lowered for ", a.world, " ranks, but ", world, " were given");
    else members = collective_members(a, r, world, node.call.name);
    auto [it, fresh] = index.try_emplace(node.call.name + "@" + (everyone ? std::string("every rank") : ranks_str(members)),
                                         static_cast<int>(sim.collectives.size()));
    if (fresh) {
        if (everyone) members = collective_members(a, r, world, node.call.name);
        SimCollective c;
        c.name = node.call.name;
        c.kind = a.kind;
        c.members = members;
        c.instruction.assign(members.size(), -1);
        c.attrs.resize(members.size());
        c.elem.assign(members.size(), 0);
        c.arrival.assign(members.size(), kNotYet);
        sim.collectives.push_back(std::move(c));
    }
    SimCollective &c = sim.collectives[it->second];
    const size_t m = everyone ? static_cast<size_t>(r) : std::find(members.begin(), members.end(), r) - members.begin();
    TESSERA_CHECK(c.instruction[m] < 0, "step simulator: rank ", r, " runs communication node '", c.name,
                  "' twice (instructions ", c.instruction[m], " and ", i, ")");
    TESSERA_CHECK(c.kind == a.kind, "step simulator: communication node '", c.name, "' is a ", comm_kind_name(c.kind),
                  " on some members of ", ranks_str(c.members), " but a ", comm_kind_name(a.kind), " on rank ", r);
    c.instruction[m] = i;
    c.attrs[m] = a;
    c.elem[m] = static_cast<int64_t>(dtype_size(type.dtype));
    rk.collective[i] = it->second;
}

int64_t piece_bytes(const SimCollective &c, size_t m, const std::vector<CommPiece> &pieces, int peer) {
    for (const CommPiece &p : pieces)
        if (p.peer == peer) return p.box.elements() * c.elem[m];
    return -1;
}

// Every member of a redistribution receives what its peers send it, piece for piece.
void check_pieces_match(const SimCollective &c) {
    const int w = static_cast<int>(c.members.size());  // every rank, in rank order
    for (int m = 0; m < w; m++)
        for (const auto *pieces : {&c.attrs[m].sends, &c.attrs[m].recvs})
            for (const CommPiece &p : *pieces)
                TESSERA_CHECK(p.peer >= 0 && p.peer < w && p.peer != m, "step simulator: communication node '",
                              c.name, "' on rank ", m, " names peer ", p.peer, " (the job has ", w, " ranks)");
    for (size_t m = 0; m < c.members.size(); m++)
        for (const CommPiece &s : c.attrs[m].sends) {
            const int64_t sent = s.box.elements() * c.elem[m];
            const int64_t got = piece_bytes(c, s.peer, c.attrs[s.peer].recvs, c.members[m]);
            TESSERA_CHECK(got == sent, "step simulator: communication node '", c.name, "': rank ", c.members[m],
                          " sends ", sent, " bytes to rank ", s.peer, ", which ",
                          got < 0 ? std::string("receives nothing from it (it would never finish: deadlock)")
                                  : "expects " + std::to_string(got) + " bytes");
        }
}

// Matches every rank's collectives; a member without the node is a deadlock.
void match_collectives(Sim &sim) {
    std::map<std::string, int> index;
    for (int r = 0; r < static_cast<int>(sim.ranks.size()); r++)
        for (size_t i = 0; i < sim.ranks[r].p->instructions.size(); i++)
            if (sim.ranks[r].p->instructions[i].kind == Instruction::Kind::Collective)
                add_member(sim, index, r, static_cast<int>(i));
    for (const SimCollective &c : sim.collectives) {
        std::vector<int> missing, have;
        for (size_t m = 0; m < c.members.size(); m++) (c.instruction[m] < 0 ? missing : have).push_back(c.members[m]);
        TESSERA_CHECK(missing.empty(), "step simulator: deadlock: communication node '", c.name, "' (",
                      comm_kind_name(c.kind), " over ranks ", ranks_str(c.members), ") runs on ranks ",
                      ranks_str(have), ", but ranks ", ranks_str(missing),
                      " never run it with that group, so the others would wait for them forever");
        if (c.kind == CommNodeKind::Redistribute) check_pieces_match(c);
    }
}

// The link a transfer among `ranks` crosses: the outermost level on which two
// of them differ (the innermost level when they do not differ at all).
const LinkLevel &link_of(const Machine &machine, const std::vector<int> &ranks, const std::string &name) {
    std::vector<int> counts;
    for (const LinkLevel &l : machine.levels) counts.push_back(l.count);
    const std::vector<int> first = rank_coords(counts, ranks[0]);
    size_t level = machine.levels.size() - 1;
    for (int r : ranks) {
        const std::vector<int> c = rank_coords(counts, r);
        for (size_t l = 0; l < level; l++)
            if (c[l] != first[l]) level = l;
    }
    const LinkLevel &link = machine.levels[level];
    TESSERA_CHECK(link.bandwidth > 0 && link.latency >= 0, "step simulator: communication node '", name,
                  "' crosses the machine's level '", link.name, "', whose bandwidth (", link.bandwidth,
                  " bytes/s) must be positive and latency (", link.latency, " s) not negative");
    return link;
}

// Records member m's times and moves its stream past the collective.
void finish_member(Sim &sim, const SimCollective &c, size_t m, double start, double end) {
    SimRank &rk = sim.ranks[c.members[m]];
    const int i = c.instruction[m];
    rk.times[i] = {start, end};
    rk.done[i] = 1;
    SimStream &s = rk.streams[static_cast<int>(rk.p->instructions[i].stream)];
    TESSERA_INTERNAL_ASSERT(s.list[s.next] == i, "a collective finished that was not at its stream's head");
    s.next++;
    s.free_s = end;
}

// All-reduce and reduce-scatter: a ring over the slowest link the group spans,
// every member from the last arrival to one common end.
void run_ring(Sim &sim, const SimCollective &c) {
    const double start = *std::max_element(c.arrival.begin(), c.arrival.end());
    const int k = static_cast<int>(c.members.size());
    double seconds = sim.opt.instruction_overhead_s;
    if (k > 1) {
        int64_t bytes = 0;
        for (const CommAttrs &a : c.attrs) bytes = std::max(bytes, a.bytes);
        const LinkLevel &link = link_of(sim.opt.machine, c.members, c.name);
        const int steps = c.kind == CommNodeKind::AllReduce ? 2 * (k - 1) : k - 1;
        seconds += steps * link.latency + static_cast<double>(bytes) / link.bandwidth;
    }
    for (size_t m = 0; m < c.members.size(); m++) finish_member(sim, c, m, start, start + seconds);
}

// A redistribution's pairwise rounds (exec/src/collective.cpp): in round s,
// rank r sends to r+s and receives from r-s at once. A transfer starts when
// both its ends have reached the round.
void run_redistribute(Sim &sim, const SimCollective &c) {
    const int w = static_cast<int>(c.members.size());  // every rank, in rank order
    std::vector<double> reach = c.arrival, first(w, std::numeric_limits<double>::infinity());
    auto transfer = [&](int from, int to, int64_t bytes) {
        const double t0 = std::max(reach[from], reach[to]);
        const LinkLevel &link = link_of(sim.opt.machine, {from, to}, c.name);
        first[from] = std::min(first[from], t0);
        first[to] = std::min(first[to], t0);
        return t0 + link.latency + static_cast<double>(bytes) / link.bandwidth;
    };
    for (int s = 1; s < w; s++) {
        std::vector<double> next = reach;
        for (int r = 0; r < w; r++) {
            const int dst = (r + s) % w, src = (r - s + w) % w;
            const int64_t sent = piece_bytes(c, r, c.attrs[r].sends, dst);
            const int64_t got = piece_bytes(c, r, c.attrs[r].recvs, src);
            if (sent >= 0) next[r] = std::max(next[r], transfer(r, dst, sent));
            if (got >= 0) next[r] = std::max(next[r], transfer(src, r, got));
        }
        reach = std::move(next);
    }
    for (int m = 0; m < w; m++) {
        const double start = std::isinf(first[m]) ? c.arrival[m] : first[m];
        finish_member(sim, c, m, start, reach[m] + sim.opt.instruction_overhead_s);
    }
}

// The least time a member measured for the collective in a real step, or -1
// when some member has none.
double measured_seconds(const Sim &sim, const SimCollective &c) {
    double least = std::numeric_limits<double>::infinity();
    for (size_t m = 0; m < c.members.size(); m++) {
        const std::vector<double> &t = *sim.ranks[c.members[m]].transfer_s;
        const double s = t.empty() ? 0 : t[c.instruction[m]];
        if (s <= 0) return -1;
        least = std::min(least, s);
    }
    return least;
}

// Rank r's stream reached collective instruction i at `at`. Returns whether
// anything changed.
bool arrive(Sim &sim, int r, int i, double at) {
    SimCollective &c = sim.collectives[sim.ranks[r].collective[i]];
    const size_t m = std::find(c.members.begin(), c.members.end(), r) - c.members.begin();
    if (c.arrival[m] != kNotYet) return false;  // waiting for the others
    c.arrival[m] = at;
    sim.ranks[r].arrived[i] = at;
    if (++c.arrived < static_cast<int>(c.members.size())) return true;
    if (const double measured = measured_seconds(sim, c); measured > 0) {
        const double start = *std::max_element(c.arrival.begin(), c.arrival.end());
        const double end = start + measured + sim.opt.instruction_overhead_s;
        for (size_t m = 0; m < c.members.size(); m++) finish_member(sim, c, m, start, end);
    } else if (c.kind == CommNodeKind::Redistribute) {
        run_redistribute(sim, c);
    } else {
        run_ring(sim, c);
    }
    return true;
}

// Runs the instruction at the head of rank r's stream s, if it can start.
bool step_stream(Sim &sim, int r, int s) {
    SimRank &rk = sim.ranks[r];
    SimStream &st = rk.streams[s];
    if (st.next == st.list.size()) return false;
    const int i = st.list[st.next];
    const Instruction &in = rk.p->instructions[i];
    double end = st.free_s;
    switch (in.kind) {
    case Instruction::Kind::Collective: return arrive(sim, r, i, st.free_s + gap_seconds(rk, i));
    case Instruction::Kind::EventRecord: end += sim.opt.instruction_overhead_s + gap_seconds(rk, i); break;
    case Instruction::Kind::EventWait: {
        const int rec = rk.record_of[i];
        if (!rk.done[rec]) return false;
        end = std::max(end + gap_seconds(rk, i), rk.times[rec].end_s) + (rk.wait_s->empty() ? 0.0 : (*rk.wait_s)[i]);
        break;
    }
    default: end += work_seconds(sim, r, i); break;
    }
    rk.times[i] = {st.free_s, end};
    rk.done[i] = 1;
    st.free_s = end;
    st.next++;
    return true;
}

// Where rank r's stream s is stuck, for the deadlock message.
std::string stuck_at(const Sim &sim, int r, int s) {
    const SimRank &rk = sim.ranks[r];
    const int i = rk.streams[s].list[rk.streams[s].next];
    const Instruction &in = rk.p->instructions[i];
    std::ostringstream os;
    os << "rank " << r << " is stuck at instruction " << i << " (" << describe_instruction(*rk.g, in) << ")";
    if (in.kind == Instruction::Kind::EventWait) {
        const int rec = rk.record_of[i];
        os << ", waiting for instruction " << rec << " (" << describe_instruction(*rk.g, rk.p->instructions[rec])
           << "), which never runs";
    }
    return os.str();
}

[[noreturn]] void fail_deadlock(const Sim &sim) {
    for (const SimCollective &c : sim.collectives) {
        if (c.arrived == 0 || c.arrived == static_cast<int>(c.members.size())) continue;
        std::vector<int> there, away;
        for (size_t m = 0; m < c.members.size(); m++) (c.arrival[m] == kNotYet ? away : there).push_back(c.members[m]);
        // Where the first absent member is held up, on the stream that would run it.
        const int r = away[0];
        const size_t m = std::find(c.members.begin(), c.members.end(), r) - c.members.begin();
        const int s = static_cast<int>(sim.ranks[r].p->instructions[c.instruction[m]].stream);
        const std::string where = stuck_at(sim, r, s);
        fail("step simulator: deadlock: communication node '", c.name, "' (", comm_kind_name(c.kind), " over ranks ",
             ranks_str(c.members), ") was reached by ranks ", ranks_str(there), " but never by ranks ",
             ranks_str(away), "; ", where);
    }
    for (int r = 0; r < static_cast<int>(sim.ranks.size()); r++)
        for (int s = 0; s < kNumStreams; s++)
            if (sim.ranks[r].streams[s].next < sim.ranks[r].streams[s].list.size())
                fail("step simulator: deadlock: ", stuck_at(sim, r, s), " on the ", stream_name(StreamKind(s)),
                     " stream");
    detail::throw_internal(__FILE__, __LINE__, "a stuck stream", "fail_deadlock found every stream done");
}

// The compute stream's time, by what it did: each instruction's span since
// the previous one ended goes to compute, comm or swap.
RankStepTime account(const SimRank &rk) {
    RankStepTime out;
    out.times = rk.times;
    for (const InstructionTime &t : rk.times) out.step_s = std::max(out.step_s, t.end_s);
    double prev = 0;
    for (int i : rk.streams[static_cast<int>(StreamKind::Compute)].list) {
        const Instruction &in = rk.p->instructions[i];
        const double span = rk.times[i].end_s - prev;
        prev = rk.times[i].end_s;
        switch (in.kind) {
        case Instruction::Kind::Compute: out.compute_s += span; break;
        case Instruction::Kind::Collective: out.exposed_comm_s += span; break;
        case Instruction::Kind::SwapIn:
        case Instruction::Kind::SwapOut: out.exposed_swap_s += span; break;
        case Instruction::Kind::EventRecord: break;
        case Instruction::Kind::EventWait: {
            const StreamKind by = rk.p->instructions[rk.record_of[i]].stream;
            if (by == StreamKind::Comm) out.exposed_comm_s += span;
            else if (by != StreamKind::Compute) out.exposed_swap_s += span;
            break;
        }
        }
    }
    out.idle_s = std::max(0.0, out.step_s - out.compute_s - out.exposed_comm_s - out.exposed_swap_s);
    return out;
}

// Whether instruction i of a rank keeps one of its cores busy while it runs.
bool occupies_a_core(const Instruction &in) {
    switch (in.kind) {
    case Instruction::Kind::Compute:
    case Instruction::Kind::SwapIn:
    case Instruction::Kind::SwapOut:
    case Instruction::Kind::Collective: return true;
    default: return false;
    }
}

// Per instruction of one rank: its span over the work it would do alone, with
// `cores` shared by every instruction running at once (processor sharing:
// each runs at min(1, cores / running) of its speed).
std::vector<double> shared_stretch(const SimRank &rk, const std::vector<double> &old, double cores) {
    std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
    const auto &ins = rk.p->instructions;
    for (size_t i = 0; i < ins.size(); i++) {
        // A collective holds its thread from when the stream reaches it:
        // MPI polls for its peers.
        const bool collective = ins[i].kind == Instruction::Kind::Collective;
        const double from = collective ? rk.arrived[i] : rk.times[i].start_s;
        if (occupies_a_core(ins[i]) && rk.times[i].end_s > from) {
            edges.emplace_back(from, 1);
            edges.emplace_back(rk.times[i].end_s, -1);
        }
    }
    std::sort(edges.begin(), edges.end());
    std::vector<double> at, rate;  // piecewise-constant speed from at[j] on
    int running = 0;
    for (const auto &[t, d] : edges) {
        running += d;
        at.push_back(t);
        rate.push_back(running > cores ? cores / running : 1.0);
    }
    std::vector<double> out = old;
    for (size_t i = 0; i < ins.size(); i++) {
        const InstructionTime &t = rk.times[i];
        if (ins[i].kind == Instruction::Kind::Collective || !occupies_a_core(ins[i]) || t.end_s <= t.start_s)
            continue;
        double done = 0;  // work done over the span, in seconds alone
        size_t j = std::upper_bound(at.begin(), at.end(), t.start_s) - at.begin();
        for (double from = t.start_s; from < t.end_s; j++) {
            const double to = j < at.size() ? std::min(at[j], t.end_s) : t.end_s;
            done += (to - from) * rate[j - 1];
            from = to;
        }
        out[i] = (t.end_s - t.start_s) / done;  // one over the mean speed
    }
    return out;
}

// One pass of the simulation with the sim's stretches.
void run_streams(Sim &sim, const std::vector<RankProgram> &ranks) {
    sim.ranks.clear();
    sim.collectives.clear();
    for (const RankProgram &rp : ranks) sim.ranks.push_back(make_rank(rp));
    match_collectives(sim);
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < static_cast<int>(sim.ranks.size()); r++)
            for (int s = 0; s < kNumStreams; s++)
                while (step_stream(sim, r, s)) moved = true;
    }
    for (const SimRank &rk : sim.ranks)
        for (const SimStream &st : rk.streams)
            if (st.next < st.list.size()) fail_deadlock(sim);
}

// Processor sharing as a fixed point: stretch by what the last pass saw
// (halfway, so that it settles), until no stretch moves by 0.001%.
void share_cores(Sim &sim, const std::vector<RankProgram> &ranks) {
    for (const SimRank &rk : sim.ranks) sim.stretch.emplace_back(rk.p->instructions.size(), 1.0);
    for (int pass = 0; pass < 100; pass++) {
        double moved = 0;
        for (size_t r = 0; r < sim.ranks.size(); r++) {
            std::vector<double> seen = shared_stretch(sim.ranks[r], sim.stretch[r], sim.opt.cores_per_rank);
            for (size_t i = 0; i < seen.size(); i++) {
                const double next = 0.5 * (sim.stretch[r][i] + seen[i]);
                moved = std::max(moved, std::abs(next - sim.stretch[r][i]) / sim.stretch[r][i]);
                sim.stretch[r][i] = next;
            }
        }
        run_streams(sim, ranks);
        if (moved < 1e-5) break;
    }
}

}  // namespace

StepPrediction simulate_step(const std::vector<RankProgram> &ranks, const StepSimOptions &options) {
    check_inputs(ranks, options);
    Sim sim{options, {}, {}, {}};
    run_streams(sim, ranks);
    if (options.cores_per_rank > 0) share_cores(sim, ranks);
    StepPrediction out;
    for (const SimRank &rk : sim.ranks) out.ranks.push_back(account(rk));
    for (int r = 0; r < static_cast<int>(out.ranks.size()); r++)
        if (out.ranks[r].step_s > out.step_s) {
            out.step_s = out.ranks[r].step_s;
            out.slowest_rank = r;
        }
    out.throughput = out.step_s > 0 ? static_cast<double>(options.batch) / out.step_s : 0;
    return out;
}

std::string StepPrediction::to_string() const {
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(3);
    for (size_t r = 0; r < ranks.size(); r++) {
        const RankStepTime &t = ranks[r];
        os << "rank " << r << ": step " << t.step_s * 1e3 << " ms = compute " << t.compute_s * 1e3
           << " + exposed comm " << t.exposed_comm_s * 1e3 << " + exposed swap " << t.exposed_swap_s * 1e3
           << " + idle " << t.idle_s * 1e3 << "\n";
    }
    os << "job: step " << step_s * 1e3 << " ms (rank " << slowest_rank << "), " << throughput << " samples/s\n";
    return os.str();
}

}  // namespace tessera
