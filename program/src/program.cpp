#include "tessera/program/program.h"

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/error.h"
#include "tessera/json_input.h"
#include "tessera/program/memory_plan.h"
#include "tessera/text.h"

namespace tessera {

namespace {

using Kind = Instruction::Kind;
constexpr std::array<Kind, 6> kKinds = {Kind::Compute, Kind::EventRecord, Kind::EventWait,
                                        Kind::SwapOut, Kind::SwapIn,      Kind::Collective};

Kind kind_from_name(const std::string &name, const std::string &where) {
    for (Kind k : kKinds)
        if (name == instruction_kind_name(k)) return k;
    fail(where, ": unknown instruction kind '", name,
         "'; expected compute, record, wait, swap-out, swap-in or collective");
}


}  // namespace

std::string describe_instruction(const Graph &g, const Instruction &in) {
    std::ostringstream os;
    os << (in.kind == Kind::Compute && in.offset >= 0 ? "recompute" : instruction_kind_name(in.kind));
    if ((in.kind == Kind::Compute || in.kind == Kind::Collective) && in.node >= 0 && in.node < g.num_nodes())
        os << " '" << g.node(in.node).call.name << "'";
    if (in.kind == Kind::EventRecord || in.kind == Kind::EventWait) os << " e" << in.event;
    if ((in.kind == Kind::SwapOut || in.kind == Kind::SwapIn) && in.tensor >= 0 && in.tensor < g.num_tensors())
        os << " '" << g.tensor(in.tensor).name << "'";
    os << " on the " << stream_name(in.stream) << " stream";
    return os.str();
}

const char *instruction_kind_name(Instruction::Kind k) {
    switch (k) {
    case Kind::Compute: return "compute";
    case Kind::EventRecord: return "record";
    case Kind::EventWait: return "wait";
    case Kind::SwapOut: return "swap-out";
    case Kind::SwapIn: return "swap-in";
    case Kind::Collective: return "collective";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown instruction kind ", static_cast<int>(k));
}

std::string Program::to_string(const Graph &g) const {
    std::ostringstream os;
    bool used[kNumStreams] = {};
    for (const Instruction &in : instructions) used[static_cast<int>(in.stream)] = true;
    int streams = 0;
    for (bool u : used) streams += u;
    os << "program: " << instructions.size() << " instructions on " << count_of(streams, "stream") << ", "
       << count_of(num_events, "event") << "\n";
    for (size_t i = 0; i < instructions.size(); i++) {
        const Instruction &in = instructions[i];
        char head[64];
        std::snprintf(head, sizeof head, "%5zu  %-9s %-10s ", i, stream_name(in.stream),
                      instruction_kind_name(in.kind));
        os << head;
        auto names = [&](const std::vector<TensorId> &ts) {
            std::string s;
            for (size_t k = 0; k < ts.size(); k++) s += (k ? ", " : "") + g.tensor(ts[k]).name;
            return s;
        };
        switch (in.kind) {
        case Kind::Compute:
        case Kind::Collective:
            if (in.node >= 0 && in.node < g.num_nodes()) {
                const Node &n = g.node(in.node);
                os << "'" << n.call.name << "' " << (n.comm ? "comm" : op_name(n.call.kind)) << "(" << names(n.inputs) << ") -> ("
                   << names(n.outputs) << ")";
            } else {
                os << "node " << in.node;
            }
            break;
        case Kind::EventRecord:
        case Kind::EventWait: os << "e" << in.event; break;
        case Kind::SwapOut:
        case Kind::SwapIn:
            os << (in.tensor >= 0 && in.tensor < g.num_tensors() ? "'" + g.tensor(in.tensor).name + "'"
                                                                   : "tensor " + std::to_string(in.tensor))
               << ", " << in.bytes << " bytes, host offset " << in.host_offset;
            if (in.offset >= 0) os << (in.kind == Kind::SwapIn ? ", to arena offset " : ", from arena offset ") << in.offset;
            break;
        }
        os << "\n";
    }
    return os.str();
}

namespace {

// The nodes of `order` with keep[i] set, in order. Operators go on the compute
// stream; a communication node goes on the comm stream after an event that
// orders it behind every operator before it, and the compute stream waits for
// it at its sync point (comm_sync_points over the whole order, so a
// subsequence waits no later than the memory plan allows).
Program emit_program(const Graph &g, const std::vector<NodeId> &order, const std::vector<bool> &keep) {
    Program p;
    const std::vector<int> sync = comm_sync_points(g, order);
    int compute_event = -1;   // recorded after the latest operator, if any since the last collective
    bool compute_ran = false;
    std::vector<std::pair<int, int>> pending;  // (sync position, event after the collective)
    for (size_t i = 0; i < order.size(); i++) {
        if (!keep[i]) continue;
        const NodeId n = order[i];
        if (g.node(n).comm) {
            if (compute_ran) {
                compute_event = p.num_events++;
                p.instructions.push_back(Instruction::record(compute_event, StreamKind::Compute));
                p.instructions.push_back(Instruction::wait(compute_event, StreamKind::Comm));
                compute_ran = false;
            }
            p.instructions.push_back(Instruction::collective(n));
            int done = p.num_events++;
            p.instructions.push_back(Instruction::record(done, StreamKind::Comm));
            pending.emplace_back(sync[i], done);
            continue;
        }
        int wait_for = -1;
        std::vector<std::pair<int, int>> still;
        for (auto [at, event] : pending) {
            if (at <= static_cast<int>(i)) wait_for = std::max(wait_for, event);
            else still.emplace_back(at, event);
        }
        pending.swap(still);
        if (wait_for >= 0) p.instructions.push_back(Instruction::wait(wait_for, StreamKind::Compute));
        p.instructions.push_back(Instruction::compute(n));
        compute_ran = true;
    }
    return p;
}

}  // namespace

Program build_program(const Graph &g, const std::vector<NodeId> &order) {
    for (NodeId n : order)
        TESSERA_CHECK(n >= 0 && n < g.num_nodes(), "build_program: node ", n, " does not exist; the graph has ",
                      g.num_nodes(), " nodes");
    return emit_program(g, order, std::vector<bool>(order.size(), true));
}

namespace {

// Which entries of `order` the targets need: walking the order backwards, a
// node is needed when it produces a needed tensor, and then its inputs are.
std::vector<bool> needed_entries(const Graph &g, const std::vector<NodeId> &order,
                                 const std::vector<TensorId> &targets) {
    std::vector<bool> in_order(g.num_nodes(), false), needed_tensor(g.num_tensors(), false);
    for (NodeId n : order) {
        TESSERA_CHECK(n >= 0 && n < g.num_nodes(), "build_program_for: node ", n,
                      " does not exist; the graph has ", g.num_nodes(), " nodes");
        in_order[n] = true;
    }
    for (TensorId t : targets) {
        TESSERA_CHECK(t >= 0 && t < g.num_tensors(), "build_program_for: target tensor ", t,
                      " does not exist; the graph has ", g.num_tensors(), " tensors");
        NodeId p = g.tensor(t).producer;
        TESSERA_CHECK(p == kNoNode || in_order[p], "build_program_for: target '", g.tensor(t).name,
                      "' is computed by node '", g.node(p).call.name, "', which is not in the node order");
        needed_tensor[t] = true;
    }
    std::vector<bool> keep(order.size(), false);
    for (size_t i = order.size(); i-- > 0;) {
        const Node &node = g.node(order[i]);
        for (TensorId t : node.outputs) keep[i] = keep[i] || needed_tensor[t];
        if (keep[i])
            for (TensorId t : node.inputs) needed_tensor[t] = true;
    }
    return keep;
}

}  // namespace

Program build_program_for(const Graph &g, const std::vector<NodeId> &order, const std::vector<TensorId> &targets) {
    return emit_program(g, order, needed_entries(g, order, targets));
}

std::vector<NodeId> order_for(const Graph &g, const std::vector<NodeId> &order, const std::vector<TensorId> &targets) {
    const std::vector<bool> keep = needed_entries(g, order, targets);
    std::vector<NodeId> out;
    for (size_t i = 0; i < order.size(); i++)
        if (keep[i]) out.push_back(order[i]);
    return out;
}

namespace {

// The order check_program() proves, as vector clocks: seen_[s][q] is how many
// instructions of stream q are ordered before stream s's current point
// (through events). A read is safe when the reading stream has seen the
// producing instruction.
class OrderCheck {
public:
    OrderCheck(const Graph &g, const Program &p)
        : g_(g), p_(p), event_clock_(p.num_events), recorded_(p.num_events, false), produced_(g.num_tensors()),
          computed_(g.num_nodes(), false) {}

    // Instruction i, given every instruction before it.
    void check(size_t i) {
        const Instruction &in = p_.instructions[i];
        int s = static_cast<int>(in.stream);
        TESSERA_CHECK(s >= 0 && s < kNumStreams, "program instruction ", i, ": stream ", s, " does not exist");
        seen_[s][s]++;
        switch (in.kind) {
        case Kind::Compute:
        case Kind::Collective: check_node(i, in, s); break;
        case Kind::EventRecord:
        case Kind::EventWait: check_event(i, in, s); break;
        case Kind::SwapOut:
        case Kind::SwapIn: check_copy(i, in); break;
        }
    }

private:
    struct Producer {
        int64_t instr = -1;  // index in the program
        int stream = 0;
        int64_t tick = 0;  // the stream's count after it
    };

    std::string where(size_t i, const Instruction &in) const {
        return detail::concat("program instruction ", i, " (", describe_instruction(g_, in), ")");
    }

    void check_node(size_t i, const Instruction &in, int s) {
        TESSERA_CHECK(in.node >= 0 && in.node < g_.num_nodes(), where(i, in), ": node ", in.node,
                      " does not exist; the graph has ", g_.num_nodes(), " nodes");
        const Node &node = g_.node(in.node);
        TESSERA_CHECK(node.comm == (in.kind == Kind::Collective), where(i, in), ": '", node.call.name, "' is ",
                      node.comm ? "a communication node, run as a collective"
                                : "an operator, run as a compute instruction");
        TESSERA_CHECK(in.stream != StreamKind::Host || in.kind == Kind::Compute, where(i, in),
                      ": only operators run on the host stream");
        if (in.kind == Kind::Compute && in.offset >= 0) {
            TESSERA_CHECK(computed_[in.node], where(i, in), ": recomputes a node not computed before it");
            TESSERA_CHECK(node.outputs.size() == 1 && storage_root(g_, node.outputs[0]) == node.outputs[0],
                          where(i, in), ": only a node with one output of its own storage can be recomputed");
        } else {
            TESSERA_CHECK(!computed_[in.node], where(i, in), ": the node is computed twice");
        }
        computed_[in.node] = true;
        for (TensorId t : node.inputs) check_read(i, in, s, t);
        for (TensorId t : node.outputs) produced_[t] = {static_cast<int64_t>(i), s, seen_[s][s]};
    }

    // Instruction i, on stream s, reads tensor t: its producer ran before it,
    // and on another stream only with an event between them.
    void check_read(size_t i, const Instruction &in, int s, TensorId t) const {
        if (g_.tensor(t).producer == kNoNode) return;
        const Producer &pr = produced_[t];
        TESSERA_CHECK(pr.instr >= 0, where(i, in), " reads '", g_.tensor(t).name, "', but its producer '",
                      g_.node(g_.tensor(t).producer).call.name, "' is not computed before it");
        TESSERA_CHECK(seen_[s][pr.stream] >= pr.tick, where(i, in), " reads '", g_.tensor(t).name,
                      "', which instruction ", pr.instr, " computes on the ",
                      stream_name(static_cast<StreamKind>(pr.stream)),
                      " stream, with no event between them: the two would race. Record an event after "
                      "instruction ", pr.instr, " and wait for it on the ", stream_name(in.stream),
                      " stream before instruction ", i);
    }

    void check_event(size_t i, const Instruction &in, int s) {
        TESSERA_CHECK(in.event >= 0 && in.event < p_.num_events, where(i, in), ": event ", in.event,
                      " does not exist; the program has ", p_.num_events, " events");
        if (in.kind == Kind::EventRecord) {
            event_clock_[in.event] = seen_[s];
            recorded_[in.event] = true;
            return;
        }
        TESSERA_CHECK(recorded_[in.event], where(i, in), ": waits for event ", in.event,
                      ", which no earlier instruction records; the wait would do nothing");
        for (int q = 0; q < kNumStreams; q++) seen_[s][q] = std::max(seen_[s][q], event_clock_[in.event][q]);
    }

    void check_copy(size_t i, const Instruction &in) const {
        TESSERA_CHECK(in.stream != StreamKind::Host, where(i, in), ": the host stream runs operators, not copies");
        TESSERA_CHECK(in.tensor >= 0 && in.tensor < g_.num_tensors(), where(i, in), ": tensor ", in.tensor,
                      " does not exist; the graph has ", g_.num_tensors(), " tensors");
        TESSERA_CHECK(in.bytes >= 0 && in.host_offset >= 0, where(i, in), ": bytes (", in.bytes,
                      ") and host offset (", in.host_offset, ") must not be negative");
        TESSERA_CHECK(in.kind == Kind::SwapOut || in.offset >= 0, where(i, in), ": arena offset ", in.offset,
                      " is negative; a swap-in needs the arena offset it copies to");
    }

    const Graph &g_;
    const Program &p_;
    std::array<std::array<int64_t, kNumStreams>, kNumStreams> seen_{};
    std::vector<std::array<int64_t, kNumStreams>> event_clock_;
    std::vector<bool> recorded_;
    std::vector<Producer> produced_;
    std::vector<bool> computed_;
};

}  // namespace

void check_program(const Graph &g, const Program &p) {
    TESSERA_CHECK(p.num_events >= 0, "program: num_events is negative (", p.num_events, ")");
    TESSERA_CHECK(p.place.empty() || static_cast<int>(p.place.size()) == g.num_tensors(), "program: 'place' has ",
                  p.place.size(), " entries but the graph has ", g.num_tensors(),
                  " tensors; give one offset per tensor (-1: the memory plan's), or none");
    OrderCheck order(g, p);
    for (size_t i = 0; i < p.instructions.size(); i++) order.check(i);
}

nlohmann::json program_to_json(const Program &p) {
    nlohmann::json list = nlohmann::json::array();
    for (const Instruction &in : p.instructions) {
        nlohmann::json j{{"kind", instruction_kind_name(in.kind)}, {"stream", stream_name(in.stream)}};
        if (in.kind == Kind::Compute || in.kind == Kind::Collective) j["node"] = in.node;
        if (in.kind == Kind::EventRecord || in.kind == Kind::EventWait) j["event"] = in.event;
        if (in.kind == Kind::SwapOut || in.kind == Kind::SwapIn || in.kind == Kind::Collective) {
            j["tensor"] = in.tensor;
            j["host_offset"] = in.host_offset;
            j["bytes"] = in.bytes;
        }
        if (in.kind == Kind::SwapOut || in.kind == Kind::SwapIn) j["offset"] = in.offset;
        if (in.kind == Kind::Compute && in.offset >= 0) j["offset"] = in.offset;
        list.push_back(std::move(j));
    }
    nlohmann::json out{{"num_events", p.num_events}, {"instructions", std::move(list)}};
    if (!p.place.empty()) out["place"] = p.place;
    return out;
}

Program program_from_json(const nlohmann::json &j, const std::string &source) {
    TESSERA_CHECK(j.is_object() && j.contains("instructions") && j["instructions"].is_array() &&
                      j.contains("num_events") && j["num_events"].is_number_integer(),
                  source, ": a program must be an object with 'num_events' (integer) and 'instructions' (array)");
    Program p;
    p.num_events = j["num_events"].get<int>();
    const nlohmann::json &list = j["instructions"];
    for (size_t i = 0; i < list.size(); i++) {
        const nlohmann::json &e = list[i];
        std::string where = detail::concat(source, ": instruction ", i);
        TESSERA_CHECK(e.is_object() && e.contains("kind") && e["kind"].is_string() && e.contains("stream") &&
                          e["stream"].is_string(),
                      where, " must be an object with string fields 'kind' and 'stream'");
        Instruction in;
        in.kind = kind_from_name(e["kind"].get<std::string>(), where);
        try {
            in.stream = stream_from_name(e["stream"].get<std::string>());
        } catch (const Error &err) {
            fail(where, ": ", err.what());
        }
        auto integer = [&](const char *name, auto &out) {
            TESSERA_CHECK(e.contains(name) && e[name].is_number_integer(), where, " (",
                          instruction_kind_name(in.kind), ") needs an integer field '", name, "'");
            out = e[name].get<std::remove_reference_t<decltype(out)>>();
        };
        if (in.kind == Kind::Compute || in.kind == Kind::Collective) integer("node", in.node);
        if (in.kind == Kind::EventRecord || in.kind == Kind::EventWait) integer("event", in.event);
        if (in.kind == Kind::SwapOut || in.kind == Kind::SwapIn || in.kind == Kind::Collective) {
            integer("tensor", in.tensor);
            integer("host_offset", in.host_offset);
            integer("bytes", in.bytes);
        }
        if (in.kind == Kind::SwapIn) integer("offset", in.offset);
        if ((in.kind == Kind::SwapOut || in.kind == Kind::Compute) && e.contains("offset")) integer("offset", in.offset);
        p.instructions.push_back(in);
    }
    if (j.contains("place")) {
        const nlohmann::json &place = j["place"];
        TESSERA_CHECK(place.is_array(), source, ": 'place' must be an array of integers (one arena offset per "
                      "tensor, -1 for the memory plan's)");
        for (size_t i = 0; i < place.size(); i++) {
            TESSERA_CHECK(place[i].is_number_integer(), source, ": place[", i, "] must be an integer, got ",
                          json_preview(place[i]));
            p.place.push_back(place[i].get<int64_t>());
        }
    }
    return p;
}

}  // namespace tessera
