// Human views of a plan. Everything here is derived from the Plan value alone,
// so a plan saved as JSON renders the same as one just searched.
//
// The views share one vocabulary:
//   * a "level" is one cut of the recursion, level 1 the outermost. Views count
//     from 1, as the plan's notes and Tofu's c1 + k1 c2 + ... do; the JSON's
//     `level` fields count from 0;
//   * an operator's strategy at a level is the text lang/'s analysis gave it;
//   * bytes are per iteration, received by all devices together, unless a
//     column says "per device".
#include "tessera/html_page.h"
#include "tessera/partition/render.h"
#include "tessera/text.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace tessera {

using json = nlohmann::json;

namespace {

std::string shape_text(const Shape &s) {
    std::vector<std::string> parts;
    for (int64_t d : s) parts.push_back(std::to_string(d));
    return "[" + join(parts, ", ") + "]";
}

std::string layout_text(const std::vector<Layout> &layout) {
    if (layout.empty()) return "whole";
    std::vector<std::string> parts;
    for (const Layout &l : layout) parts.push_back(l.str());
    return join(parts, " | ");
}

std::string strategy_text(const OpPlan &o) { return o.strategy.empty() ? "whole" : join(o.strategy, " | "); }

// The name of the machine level a cut runs over ("node").
std::string link_name(const Plan &p, const Cut &c) {
    return c.link >= 0 && c.link < static_cast<int>(p.machine.levels.size()) ? p.machine.levels[c.link].name
                                                                             : "link " + std::to_string(c.link);
}

// "level 1 (2-way over node)": what the levels of op and tensor tables mean.
std::string level_name(const Plan &p, size_t level) {
    if (level >= p.cuts.size()) return "level " + std::to_string(level + 1);
    const Cut &c = p.cuts[level];
    return strf("level %zu (%d-way over %s)", level + 1, c.k, link_name(p, c).c_str());
}

std::string ratio_text(int64_t a, int64_t b) {
    if (b == 0) return a == 0 ? "1.00x" : "n/a";
    return strf("%.2fx", static_cast<double>(a) / static_cast<double>(b));
}

struct MemoryRow {
    const char *name;
    int64_t bytes;
};

// Working copies only where there are (bf16 and fp16 plans).
std::vector<MemoryRow> memory_rows(const MemoryFootprint &m) {
    std::vector<MemoryRow> rows = {
        {"weights", m.weights}, {"gradients", m.gradients}, {"optimizer state", m.optimizer_state},
        {"activations", m.activations}};
    if (m.working_copies > 0) rows.push_back({"working copies", m.working_copies});
    rows.push_back({"comm buffers", m.comm_buffers});
    return rows;
}

// Whole and per-device bytes of the tensors of each role, in first-seen order:
// the one place the plan says how much splitting saved, role by role.
struct RoleBytes {
    std::string role;
    int tensors = 0;
    int64_t whole = 0, local = 0;
};

std::vector<RoleBytes> role_bytes(const Plan &p) {
    std::vector<RoleBytes> out;
    for (const TensorPlan &t : p.tensors) {
        auto it = std::find_if(out.begin(), out.end(), [&](const RoleBytes &r) { return r.role == t.role; });
        if (it == out.end()) it = out.insert(out.end(), RoleBytes{t.role});
        it->tensors++;
        it->whole += t.bytes;
        it->local += t.local_bytes;
    }
    return out;
}

// Communication summed by level and kind, in level then kind order.
struct CommGroup {
    int level = 0;
    CommKind kind = CommKind::AllGather;
    int steps = 0;
    int64_t bytes = 0;
    double time_s = 0;
};

std::vector<CommGroup> comm_groups(const Plan &p) {
    std::map<std::pair<int, int>, CommGroup> groups;
    for (const CommStep &c : p.comm) {
        CommGroup &g = groups[{c.level, static_cast<int>(c.kind)}];
        g.level = c.level;
        g.kind = c.kind;
        g.steps++;
        g.bytes += c.bytes;
        g.time_s += c.time_s;
    }
    std::vector<CommGroup> out;
    for (const auto &[key, g] : groups) out.push_back(g);
    return out;
}

// Indices of the steps moving the most bytes, largest first; ties keep plan order.
std::vector<size_t> top_steps(const Plan &p, size_t limit) {
    std::vector<size_t> idx(p.comm.size());
    for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return p.comm[a].bytes > p.comm[b].bytes; });
    if (idx.size() > limit) idx.resize(limit);
    return idx;
}

int64_t comm_step_bytes(const Plan &p) {
    int64_t total = 0;
    for (const CommStep &c : p.comm) total += c.bytes;
    return total;
}

double comm_step_time(const Plan &p) {
    double total = 0;
    for (const CommStep &c : p.comm) total += c.time_s;
    return total;
}

size_t num_levels(const Plan &p) {
    size_t n = p.cuts.size();
    for (const OpPlan &o : p.ops) n = std::max(n, o.strategy.size());
    return n;
}

constexpr size_t kTopSteps = 20;

std::string level_bytes_text(const Plan &p) {
    std::vector<std::string> parts;
    for (size_t l = 0; l < p.level_bytes.size(); l++)
        parts.push_back("level " + std::to_string(l + 1) + " " + format_bytes(p.level_bytes[l]));
    return join(parts, ", ");
}

}  // namespace

std::string cuts_str(const Plan &p) {
    if (p.cuts.empty()) return "none (one device)";
    std::vector<std::string> parts;
    for (const Cut &c : p.cuts) parts.push_back(std::to_string(c.k) + " over " + link_name(p, c));
    return join(parts, ", then ");
}

namespace {

std::string table_summary(const Plan &p) {
    std::string s;
    s += "model        " + p.model + "\n";
    s += "strategy     " + p.strategy + "\n";
    s += strf("devices      %d\n", p.devices);
    s += "machine      " + p.machine.name + ": " + machine_str(p.machine) + "\n";
    s += "cuts         " + cuts_str(p) + "\n";
    s += strf("coarsening   %d ops -> %d groups, %d tensors -> %d groups\n", p.ops_before_coarsening,
              p.ops_after_coarsening, p.tensors_before_coarsening, p.tensors_after_coarsening);
    const std::string levels = p.level_bytes.empty() ? "" : "; " + level_bytes_text(p);
    s += "comm bytes   " + format_bytes(p.comm_bytes) + " per iteration (" + with_commas(p.comm_bytes) + " bytes" +
         (p.executable ? ", as lowered" : levels) + ")\n";
    if (p.executable) {
        const int64_t most = *std::max_element(p.rank_comm_bytes.begin(), p.rank_comm_bytes.end());
        s += "lowered      the busiest rank sends " + with_commas(most) + " bytes; the search counted " +
             with_commas(p.search_bytes) + levels + "\n";
    }
    s += "comm time    " + format_duration(p.predicted_comm_time_s) + " per iteration (predicted)\n";
    s += "search time  " + format_duration(p.search_time_s) + "\n";
    return s;
}

std::string table_memory(const Plan &p) {
    std::string s = "\nmemory per device\n";
    TextTable mem({"category", "per device"}, {false, true});
    for (const MemoryRow &r : memory_rows(p.memory)) mem.add({r.name, format_bytes(r.bytes)});
    mem.add({"total", format_bytes(p.memory.total())});
    s += mem.str();
    s += strf("  peak %s per device, %s on one device (%s less)\n", format_bytes(p.per_device_peak_bytes).c_str(),
              format_bytes(p.single_device_peak_bytes).c_str(),
              ratio_text(p.single_device_peak_bytes, p.per_device_peak_bytes).c_str());
    if (!p.tensors.empty()) {
        s += "\ntensor bytes by role\n";
        TextTable roles({"role", "tensors", "whole", "per device"}, {false, true, true, true});
        for (const RoleBytes &r : role_bytes(p))
            roles.add({r.role, std::to_string(r.tensors), format_bytes(r.whole), format_bytes(r.local)});
        s += roles.str();
    }
    return s;
}

std::string table_ops_and_tensors(const Plan &p) {
    const size_t levels = num_levels(p);
    std::string s = strf("\noperators (%zu)\n", p.ops.size());
    std::vector<std::string> head = {"node", "op", "group"};
    std::vector<bool> right = {false, false, true};
    for (size_t l = 0; l < levels; l++) head.push_back(level_name(p, l)), right.push_back(false);
    TextTable ops(head, right);
    for (const OpPlan &o : p.ops) {
        std::vector<std::string> row = {o.node, o.op, std::to_string(o.group)};
        for (size_t l = 0; l < levels; l++) row.push_back(l < o.strategy.size() ? o.strategy[l] : "");
        ops.add(row);
    }
    s += ops.str();
    s += strf("\ntensors (%zu)\n", p.tensors.size());
    TextTable tensors({"tensor", "role", "dtype", "shape", "layout", "local shape", "local bytes"},
                      {false, false, false, false, false, false, true});
    for (const TensorPlan &t : p.tensors)
        tensors.add({t.tensor, t.role, t.dtype, shape_text(t.shape), layout_text(t.layout), shape_text(t.local_shape),
                     format_bytes(t.local_bytes)});
    return s + tensors.str();
}

std::string table_comm(const Plan &p) {
    std::string s = strf("\ncommunication (%zu steps, %s, %s)\n", p.comm.size(),
                         format_bytes(comm_step_bytes(p)).c_str(), format_duration(comm_step_time(p)).c_str());
    if (p.comm.empty()) return s;
    TextTable groups({"level", "kind", "steps", "bytes", "time"}, {false, false, true, true, true});
    for (const CommGroup &g : comm_groups(p))
        groups.add({std::to_string(g.level + 1), comm_kind_name(g.kind), std::to_string(g.steps),
                    format_bytes(g.bytes), format_duration(g.time_s)});
    s += groups.str();
    s += strf("\nlargest communication steps (top %zu of %zu)\n", std::min(kTopSteps, p.comm.size()), p.comm.size());
    TextTable steps({"level", "kind", "node", "tensor", "what", "bytes", "time"},
                    {false, false, false, false, false, true, true});
    for (size_t i : top_steps(p, kTopSteps)) {
        const CommStep &c = p.comm[i];
        steps.add({std::to_string(c.level + 1), comm_kind_name(c.kind), c.node, c.tensor, c.what,
                   format_bytes(c.bytes), format_duration(c.time_s)});
    }
    steps.add({"", "", "", "", "total", format_bytes(comm_step_bytes(p)), format_duration(comm_step_time(p))});
    return s + steps.str();
}

}  // namespace

std::string plan_table(const Plan &p) {
    std::string s = table_summary(p) + table_memory(p) + table_ops_and_tensors(p) + table_comm(p);
    if (!p.notes.empty()) {
        s += strf("\nnotes (%zu)\n", p.notes.size());
        for (const std::string &n : p.notes) s += "  - " + n + "\n";
    }
    return s;
}

// ---------------------------------------------------------------------------
// Graphviz

namespace {

std::string dot_quote(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

// Pale fills that keep black text readable; strategies beyond these are grey.
constexpr const char *kPalette[] = {"#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99",
                                    "#8dd3c7", "#bebada", "#80b1d3", "#fccde5", "#ccebc5", "#ffed6f"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr const char *kOtherColour = "#d9d9d9";

// Strategies in order of first appearance, so colours do not change between runs.
std::vector<std::string> strategy_keys(const Plan &p) {
    std::vector<std::string> keys;
    for (const OpPlan &o : p.ops) {
        std::string k = strategy_text(o);
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    return keys;
}

const char *colour_of(const std::vector<std::string> &keys, const std::string &key) {
    size_t i = std::find(keys.begin(), keys.end(), key) - keys.begin();
    return i < kPaletteSize ? kPalette[i] : kOtherColour;
}

}  // namespace

namespace {

std::string dot_op_id(size_t i) { return "op" + std::to_string(i); }
std::string dot_tensor_id(size_t i) { return "t" + std::to_string(i); }

// Operators, clustered by op group where a group has more than one member.
std::string dot_operators(const Plan &p, const std::vector<std::string> &keys) {
    std::string s;
    std::map<int, std::vector<size_t>> groups;
    for (size_t i = 0; i < p.ops.size(); i++) groups[p.ops[i].group].push_back(i);
    for (const auto &[group, members] : groups) {
        bool cluster = members.size() > 1;
        std::string indent = cluster ? "    " : "  ";
        if (cluster)
            s += "  subgraph cluster_g" + std::to_string(group) + " {\n    label=" +
                 dot_quote("group " + std::to_string(group)) + ";\n    style=dashed;\n    color=\"#888888\";\n";
        for (size_t i : members) {
            const OpPlan &o = p.ops[i];
            std::string key = strategy_text(o);
            s += indent + dot_op_id(i) + " [shape=box, style=\"rounded,filled\", fillcolor=\"" + colour_of(keys, key) +
                 "\", label=" + dot_quote(o.node + "\n" + o.op + "\n" + key) + "];\n";
        }
        if (cluster) s += "  }\n";
    }
    return s;
}

// Tensors as ellipses; edges from their producer (labelled with the layout)
// and into their readers. A converted read is drawn bold red with its
// collective and bytes; an operator's converted output likewise.
std::string dot_dataflow(const Plan &p) {
    std::map<std::string, int> node_index;
    for (size_t i = 0; i < p.ops.size(); i++) node_index.emplace(p.ops[i].node, static_cast<int>(i));
    std::map<std::string, size_t> tensor_index;
    for (size_t i = 0; i < p.tensors.size(); i++) tensor_index.emplace(p.tensors[i].tensor, i);
    std::map<std::pair<size_t, std::string>, std::vector<const CommStep *>> steps;  // (op, tensor) -> steps
    for (const CommStep &c : p.comm) {
        auto n = node_index.find(c.node);
        if (n != node_index.end()) steps[{static_cast<size_t>(n->second), c.tensor}].push_back(&c);
    }
    std::string s;
    std::vector<bool> drawn(p.tensors.size(), false);
    auto draw_tensor = [&](size_t i) {
        if (drawn[i]) return;
        drawn[i] = true;
        const TensorPlan &t = p.tensors[i];
        s += "  " + dot_tensor_id(i) + " [shape=ellipse, label=" +
             dot_quote(t.tensor + "\n" + shape_text(t.shape) + " " + t.role + "\n" + layout_text(t.layout)) + "];\n";
    };
    auto edge_attrs = [&](size_t op, const std::string &tensor, const std::string &plain) {
        auto it = steps.find({op, tensor});
        if (it == steps.end()) return plain;
        std::string label;
        for (const CommStep *c : it->second)
            label += (label.empty() ? "" : "\n") + std::string(comm_kind_name(c->kind)) + " " + format_bytes(c->bytes) +
                     " (level " + std::to_string(c->level + 1) + ")";
        return " [color=red, fontcolor=red, penwidth=2.5, style=bold, label=" + dot_quote(label) + "]";
    };
    for (size_t i = 0; i < p.ops.size(); i++) {
        for (const std::string &out : p.ops[i].outputs) {
            auto t = tensor_index.find(out);
            if (t == tensor_index.end()) continue;
            draw_tensor(t->second);
            s += "  " + dot_op_id(i) + " -> " + dot_tensor_id(t->second) +
                 edge_attrs(i, out, " [label=" + dot_quote(layout_text(p.tensors[t->second].layout)) + "]") + ";\n";
        }
        for (const std::string &in : p.ops[i].inputs) {
            auto t = tensor_index.find(in);
            if (t == tensor_index.end()) continue;
            draw_tensor(t->second);
            s += "  " + dot_tensor_id(t->second) + " -> " + dot_op_id(i) + edge_attrs(i, in, "") + ";\n";
        }
    }
    return s;
}

// The legend: one swatch per strategy, in the colours used above.
std::string dot_legend(const std::vector<std::string> &keys) {
    if (keys.empty()) return "";
    std::string s = "  subgraph cluster_legend {\n    label=\"strategies\";\n    style=solid;\n    color=\"#888888\";\n";
    for (size_t i = 0; i < keys.size() && i <= kPaletteSize; i++) {
        bool other = i == kPaletteSize;
        s += "    legend" + std::to_string(i) + " [shape=box, style=\"rounded,filled\", fillcolor=\"" +
             (other ? kOtherColour : kPalette[i]) + "\", label=" + dot_quote(other ? "other" : keys[i]) + "];\n";
    }
    return s + "  }\n";
}

}  // namespace

std::string plan_dot(const Plan &p) {
    const std::vector<std::string> keys = strategy_keys(p);
    std::string s = "digraph plan {\n";
    s += "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n";
    s += "  labelloc=t;\n  label=" +
         dot_quote(p.model + ": " + p.strategy + " on " + machine_str(p.machine) + ", " + format_bytes(p.comm_bytes) +
                   " communication per iteration") +
         ";\n";
    // Steps inside an operator (its own reductions) are listed in its label's tooltip.
    return s + dot_operators(p, keys) + dot_dataflow(p) + dot_legend(keys) + "}\n";
}

// ---------------------------------------------------------------------------
// HTML: one page (base's html_page), its cards, bars and tables styled by the
// page's shared stylesheet.

namespace {

std::string card(const std::string &key, const std::string &value, const std::string &sub) {
    return "<div class=\"card\"><div class=\"k\">" + html_escape(key) + "</div><div class=\"v\">" +
           html_escape(value) + "</div><div class=\"s\">" + html_escape(sub) + "</div></div>\n";
}

std::string bar_row(const std::string &label, int64_t bytes, int64_t scale, const char *cls) {
    double pct = scale > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(scale) : 0;
    pct = std::clamp(pct, 0.0, 100.0);
    return "<div>" + html_escape(label) + "</div><div><div class=\"bar" + std::string(cls) + "\" style=\"width:" +
           strf("%.2f", pct) + "%\"></div></div><div class=\"n\">" + html_escape(format_bytes(bytes)) + "</div>\n";
}

std::vector<HtmlCell> comm_row(const CommStep &c) {
    return {{std::to_string(c.level + 1), true}, {comm_kind_name(c.kind)}, {c.node}, {c.tensor}, {c.what},
            {format_bytes(c.bytes), true},   {format_duration(c.time_s), true}};
}

std::string html_cards(const Plan &p) {
    std::string s;
    s += "<div class=\"cards\">\n";
    s += card("communication", format_bytes(p.comm_bytes), with_commas(p.comm_bytes) + " bytes per iteration");
    s += card("predicted comm time", format_duration(p.predicted_comm_time_s), "per iteration");
    s += card("peak memory per device", format_bytes(p.per_device_peak_bytes),
              "one device: " + format_bytes(p.single_device_peak_bytes) + " (" +
                  ratio_text(p.single_device_peak_bytes, p.per_device_peak_bytes) + " less)");
    s += card("operators", std::to_string(p.ops_before_coarsening),
              std::to_string(p.ops_after_coarsening) + " groups after coarsening");
    s += card("tensors", std::to_string(p.tensors_before_coarsening),
              std::to_string(p.tensors_after_coarsening) + " groups after coarsening");
    s += card("search time", format_duration(p.search_time_s), p.strategy);
    s += "</div>\n";
    return s;
}

std::string html_memory(const Plan &p) {
    std::string s = html_h2("Memory per device") + "<div class=\"bars\">\n";
    int64_t scale = std::max({p.memory.total(), p.per_device_peak_bytes, p.single_device_peak_bytes, int64_t{1}});
    for (const MemoryRow &r : memory_rows(p.memory)) s += bar_row(r.name, r.bytes, scale, "");
    s += bar_row("total", p.memory.total(), scale, "");
    s += bar_row("peak per device", p.per_device_peak_bytes, scale, " peak");
    s += bar_row("peak on one device", p.single_device_peak_bytes, scale, " one");
    s += "</div>\n";
    if (!p.tensors.empty()) {
        std::vector<std::vector<HtmlCell>> rows;
        for (const RoleBytes &r : role_bytes(p))
            rows.push_back({{r.role}, {std::to_string(r.tensors), true}, {format_bytes(r.whole), true},
                            {format_bytes(r.local), true}});
        s += html_paragraph("Tensor bytes by role, whole and on each device:");
        s += html_table({{"role"}, {"tensors", true}, {"whole", true}, {"per device", true}}, rows);
    }
    return s;
}

// Communication by level and kind, then the largest steps; every step, in
// plan order, folded away when there are more than those.
std::string html_comm(const Plan &p) {
    std::string s = html_h2("Communication");
    s += html_paragraph(with_commas(comm_step_bytes(p)) + " bytes in " + std::to_string(p.comm.size()) +
                        " steps per iteration" + (p.level_bytes.empty() ? "" : "; " + level_bytes_text(p)) + ".");
    if (p.comm.empty()) return s;
    std::vector<std::vector<HtmlCell>> rows;
    for (const CommGroup &g : comm_groups(p))
        rows.push_back({{std::to_string(g.level + 1), true},
                        {comm_kind_name(g.kind)},
                        {std::to_string(g.steps), true},
                        {format_bytes(g.bytes), true},
                        {format_duration(g.time_s), true}});
    s += html_table({{"level", true}, {"kind"}, {"steps", true}, {"bytes", true}, {"time", true}}, rows);
    const std::vector<HtmlCell> head = {{"level", true}, {"kind"}, {"node"}, {"tensor"}, {"what"}, {"bytes", true},
                                        {"time", true}};
    rows.clear();
    for (size_t i : top_steps(p, kTopSteps)) rows.push_back(comm_row(p.comm[i]));
    rows.push_back({{""}, {""}, {""}, {""}, {"total"}, {format_bytes(comm_step_bytes(p)), true},
                    {format_duration(comm_step_time(p)), true}});
    s += html_paragraph("Largest steps (top " + std::to_string(std::min(kTopSteps, p.comm.size())) + " of " +
                        std::to_string(p.comm.size()) + "):") +
         html_table(head, rows);
    if (p.comm.size() > kTopSteps) {
        rows.clear();
        for (const CommStep &c : p.comm) rows.push_back(comm_row(c));
        s += html_details("All " + std::to_string(p.comm.size()) + " steps, in plan order", html_table(head, rows));
    }
    return s;
}

std::string html_operators(const Plan &p) {
    std::vector<std::string> keys = strategy_keys(p);
    const size_t levels = num_levels(p);
    std::vector<HtmlCell> head = {{"node"}, {"op"}, {"group", true}};
    for (size_t l = 0; l < levels; l++) head.push_back({level_name(p, l)});
    std::vector<std::vector<HtmlCell>> rows;
    for (const OpPlan &o : p.ops) {
        // The swatch is the operator's colour in the DOT view too.
        std::vector<HtmlCell> row = {{o.node, false, colour_of(keys, strategy_text(o))},
                                     {o.op},
                                     {std::to_string(o.group), true}};
        for (size_t l = 0; l < levels; l++) row.push_back({l < o.strategy.size() ? o.strategy[l] : ""});
        rows.push_back(std::move(row));
    }
    return html_h2("Operators") + html_table(head, rows);
}

std::string html_tensors(const Plan &p) {
    std::vector<std::vector<HtmlCell>> rows;
    for (const TensorPlan &t : p.tensors)
        rows.push_back({{t.tensor},
                        {t.role},
                        {t.dtype},
                        {shape_text(t.shape)},
                        {layout_text(t.layout)},
                        {shape_text(t.local_shape)},
                        {std::to_string(t.group), true},
                        {format_bytes(t.local_bytes), true}});
    const std::string table = html_table(
        {{"tensor"}, {"role"}, {"dtype"}, {"shape"}, {"layout"}, {"local shape"}, {"group", true}, {"local bytes", true}},
        rows);
    return html_h2("Tensors") +
           html_details(std::to_string(p.tensors.size()) + " tensors with their layouts", table);
}

std::string html_notes(const Plan &p) {
    std::string s = html_h2("Notes");
    if (p.notes.empty()) return s + html_paragraph("None: every tensor was split as the search chose.");
    s += "<ul class=\"notes\">\n";
    for (const std::string &n : p.notes) s += "<li>" + html_escape(n) + "</li>\n";
    return s + "</ul>\n";
}

}  // namespace

std::string plan_html(const Plan &p) {
    std::string title = "Tessera plan: " + p.model + " (" + p.strategy + ", " + std::to_string(p.devices) +
                        (p.devices == 1 ? " device)" : " devices)");
    std::string note = html_escape(machine_str(p.machine)) + "; cuts: " + html_escape(cuts_str(p));
    return html_page(title, title, note,
                     html_cards(p) + html_memory(p) + html_comm(p) + html_operators(p) + html_tensors(p) +
                         html_notes(p));
}

// ---------------------------------------------------------------------------
// Comparison

std::string compare_table(const std::vector<Plan> &plans) {
    if (plans.empty()) return "no plans to compare\n";
    std::string s = strf("%s on %s\n", plans[0].model.c_str(), machine_str(plans[0].machine).c_str());
    TextTable t({"strategy", "comm/iter", "vs " + plans[0].strategy, "lowered", "comm time", "weights", "gradients",
                 "opt state", "activations", "comm buf", "total/dev", "peak/dev", "search"},
                {false, true, true, true, true, true, true, true, true, true, true, true, true});
    for (const Plan &p : plans)
        t.add({p.strategy, format_bytes(p.comm_bytes), ratio_text(p.comm_bytes, plans[0].comm_bytes),
               p.executable ? format_bytes(p.lowered_comm_bytes()) : "-",
               format_duration(p.predicted_comm_time_s), format_bytes(p.memory.weights), format_bytes(p.memory.gradients),
               format_bytes(p.memory.optimizer_state), format_bytes(p.memory.activations),
               format_bytes(p.memory.comm_buffers), format_bytes(p.memory.total()), format_bytes(p.per_device_peak_bytes),
               format_duration(p.search_time_s)});
    s += t.str("");
    return s;
}

std::string compare_json(const std::vector<Plan> &plans, int indent) {
    json rows = json::array();
    for (const Plan &p : plans) {
        json ratio = nullptr;  // undefined when the first plan moves nothing and this one does
        if (plans[0].comm_bytes != 0)
            ratio = static_cast<double>(p.comm_bytes) / static_cast<double>(plans[0].comm_bytes);
        else if (p.comm_bytes == 0)
            ratio = 1.0;
        auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
        rows.push_back({{"model", p.model},
                        {"strategy", p.strategy},
                        {"devices", p.devices},
                        {"comm_bytes", p.comm_bytes},
                        {"lowered_comm_bytes", p.executable ? json(p.lowered_comm_bytes()) : json(nullptr)},
                        {"comm_ratio", ratio},
                        {"predicted_comm_time_s", finite(p.predicted_comm_time_s)},
                        {"memory",
                         {{"weights", p.memory.weights},
                          {"gradients", p.memory.gradients},
                          {"optimizer_state", p.memory.optimizer_state},
                          {"activations", p.memory.activations},
                          {"working_copies", p.memory.working_copies},
                          {"comm_buffers", p.memory.comm_buffers},
                          {"total", p.memory.total()}}},
                        {"per_device_peak_bytes", p.per_device_peak_bytes},
                        {"single_device_peak_bytes", p.single_device_peak_bytes},
                        {"search_time_s", finite(p.search_time_s)}});
    }
    return json{{"format", "tessera-compare"}, {"version", 1}, {"plans", rows}}.dump(indent);
}

}  // namespace tessera
