// The recursion of Tofu section 5.3 and the plan it produces. Each cut builds a
// CutProblem (solver.h) from the cost model (cost.h) on the current local
// shapes, solves it, and then shrinks every tensor and operator to its part.
#include "tessera/partition/partition.h"
#include "tessera/partition/lower.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "cost.h"
#include "tessera/error.h"
#include "tessera/lang/strategy.h"
#include "tessera/partition/coarsen.h"
#include "tessera/text.h"

namespace tessera {

using part::NodeOption;

namespace {

constexpr const char *kStrategyNames[] = {"tofu", "data", "owt", "equalchop", "brute", "ddp", "fsdp"};

bool matmul_like(OpKind k) { return k == OpKind::Matmul || k == OpKind::BatchMatmul; }

// The root primal of a gradient chain, to tell a weight's gradient from an
// activation's.
TensorId primal_of(const Graph &g, TensorId t) {
    while (g.tensor(t).grad_of != kNoTensor) t = g.tensor(t).grad_of;
    return t;
}

// A weight, its optimizer state, or their updated values (an optimizer's outputs).
bool is_weight_state(const Graph &g, TensorId t) {
    const NodeId p = g.tensor(t).producer;
    return is_persistent(g.tensor(t).role) || (p != kNoNode && g.node(p).optimizer);
}

// Whether `name` is `pattern`, or starts with it less a final '*' (--force,
// --weights).
bool matches(const std::string &pattern, const std::string &name) {
    if (pattern.empty() || pattern.back() != '*') return name == pattern;
    return name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
}

// A group of partial sums holds its weight and optimizer state replicated.
Layout layout_of_member(const Graph &g, TensorId t, const Layout &group_layout) {
    return group_layout.is_partial() && is_weight_state(g, t) ? Layout::replicated() : group_layout;
}

bool is_weight_gradient(const Graph &g, TensorId t) {
    return g.tensor(t).role == TensorRole::Gradient && g.tensor(primal_of(g, t)).role == TensorRole::Param;
}

bool local_batch_norm(const PartitionOptions &o) {
    return (o.strategy == PartitionStrategy::Ddp || o.strategy == PartitionStrategy::Fsdp) && !o.sync_batch_norm;
}

// Everything the recursion tracks between cuts.
class Search {
public:
    Search(const Graph &g, const PartitionOptions &opts)
        : g_(g), opts_(opts), co_(coarsen(g, opts.coarsen)) {
        for (const TensorInfo &t : g.tensors()) tshape_.push_back(t.type);
        tmin_ = tshape_;
        for (const Node &n : g.nodes()) {
            std::vector<TensorType> in, out;
            for (TensorId t : n.inputs) in.push_back(g.tensor(t).type);
            for (TensorId t : n.outputs) out.push_back(g.tensor(t).type);
            strategies_.push_back(strategies_for(n.call, in, local_batch_norm(opts)));
            in_.push_back(in);
            out_.push_back(out);
        }
        in_min_ = in_;
        out_min_ = out_;
        members_.resize(co_.num_tensor_groups);
        for (TensorId t = 0; t < g.num_tensors(); t++) members_[co_.tensor_group[t]].push_back(t);
        persistent_.assign(co_.num_tensor_groups, false);
        for (TensorId t = 0; t < g.num_tensors(); t++)
            if (is_persistent(g.tensor(t).role)) persistent_[co_.tensor_group[t]] = true;
        find_partial_groups();
        find_weight_derived_groups();
        group_layouts_.resize(co_.num_tensor_groups);
        node_labels_.resize(g.num_nodes());
        slot_converted_.resize(g.num_nodes());
        for (NodeId n = 0; n < g.num_nodes(); n++)
            slot_converted_[n].assign(in_[n].size() + out_[n].size(), false);
        classify_for_owt();
        match_forced();
        match_weights();
    }

    // Runs every cut; fills the plan's per-level and per-step fields.
    void run(const std::vector<Cut> &cuts, const Machine &machine, Plan &plan) {
        int64_t groups = 1;  // parts so far: k1 k2 ... k_{l-1}
        const int devices = plan.devices;
        for (size_t l = 0; l < cuts.size(); l++) {
            const int k = cuts[l].k;
            const LinkLevel &link = machine.levels.at(cuts[l].link);
            std::vector<std::vector<Layout>> domains = build_domains(k, static_cast<int>(l), plan.notes);
            std::vector<std::vector<NodeOption>> options(g_.num_nodes());
            std::vector<Layout> data_layouts;  // DataParallel's one layout per group
            for (const auto &d : domains) data_layouts.push_back(d[0]);
            for (NodeId n = 0; n < g_.num_nodes(); n++) {
                const bool staged = opts_.staged_reductions || !forced_[n].empty();
                options[n] = part::node_options(g_.node(n).call, strategies_[n], in_[n], out_[n], k, opts_.executable,
                                                staged);
                drop_too_short(n, options[n], k);
                if (!forced_[n].empty()) keep_forced(n, options[n], k, static_cast<int>(l));
                else if (data_parallel()) keep_in_place(n, options[n], data_layouts, k);
            }
            CutProblem problem = build_problem(domains, options, k);
            CutSolution sol = solve(problem);
            // Apply: layouts, then each node's best option, its conversions, shapes.
            std::vector<Layout> chosen(co_.num_tensor_groups);
            for (int gid = 0; gid < co_.num_tensor_groups; gid++) chosen[gid] = domains[gid][sol.choice[gid]];
            int64_t level_cost = 0;
            for (NodeId n = 0; n < g_.num_nodes(); n++) {
                const Node &node = g_.node(n);
                int best = 0;
                int64_t best_cost = -1;
                for (size_t o = 0; o < options[n].size(); o++) {
                    int64_t c = option_cost(n, options[n][o], chosen, k);
                    if (best_cost < 0 || c < best_cost) {
                        best_cost = c;
                        best = static_cast<int>(o);
                    }
                }
                const NodeOption &opt = options[n][best];
                level_cost += best_cost;
                node_labels_[n].push_back(opt.label);
                if (opt.strategy < 0 && options[n].size() == 1 && !all_replicated(n, chosen))
                    note_replicated_op(n, k, static_cast<int>(l), plan.notes);
                record_steps(n, opt, chosen, k, static_cast<int>(l), groups, devices, link, plan);
                for (size_t i = 0; i < node.inputs.size(); i++) {
                    in_[n][i] = part::input_after(in_[n][i], opt.inputs[i], opt.var_extent, k);
                    if (opt.inputs[i].split) shorten(in_min_[n][i], opt.inputs[i].dim, k);
                }
                for (size_t j = 0; j < node.outputs.size(); j++) {
                    out_[n][j] = part::output_after(out_[n][j], opt.outputs[j], k);
                    if (opt.outputs[j].form == part::OutForm::Split) shorten(out_min_[n][j], opt.outputs[j].dim, k);
                }
            }
            TESSERA_INTERNAL_ASSERT(level_cost == sol.cost, "cut ", l, ": the chosen strategies cost ", level_cost,
                                    " bytes but the search found ", sol.cost);
            for (int gid = 0; gid < co_.num_tensor_groups; gid++) {
                group_layouts_[gid].push_back(chosen[gid]);
                if (!chosen[gid].is_split()) continue;
                for (TensorId t : members_[gid]) {
                    int64_t &extent = tshape_[t].shape[chosen[gid].dim];
                    extent = block_size(extent, k, 0);  // the longest block: memory is estimated for it
                    shorten(tmin_[t], chosen[gid].dim, k);
                }
            }
            plan.level_bytes.push_back(groups * sol.cost);
            groups *= k;
        }
    }

    const Coarsening &coarsening() const { return co_; }
    const std::vector<TensorType> &local_types() const { return tshape_; }
    const std::vector<std::vector<Layout>> &group_layouts() const { return group_layouts_; }
    // Tensor t's layout at every level (tensor_layout's).
    std::vector<Layout> tensor_layouts(TensorId t) const {
        std::vector<Layout> out;
        for (const Layout &l : group_layouts_[co_.tensor_group[t]]) out.push_back(layout_of_member(g_, t, l));
        return out;
    }
    const std::vector<std::vector<std::string>> &node_labels() const { return node_labels_; }
    const std::vector<std::vector<TensorType>> &local_inputs() const { return in_; }
    const std::vector<std::vector<TensorType>> &local_outputs() const { return out_; }
    const std::vector<std::vector<bool>> &slot_converted() const { return slot_converted_; }
    // Notes beyond kMaxNotes per kind, left out of the plan.
    int notes_dropped() const {
        return std::max(0, noted_tensors_ - kMaxNotes) + std::max(0, noted_ops_ - kMaxNotes);
    }

private:
    // Which operators PartitionOptions::force fixes, checked against their strategies.
    void match_forced() {
        forced_.assign(g_.num_nodes(), "");
        for (const auto &[pattern, var] : opts_.force) {
            const bool prefix = !pattern.empty() && pattern.back() == '*';
            int matched = 0;
            for (NodeId n = 0; n < g_.num_nodes(); n++) {
                if (!matches(pattern, g_.node(n).call.name)) continue;
                matched++;
                std::vector<std::string> valid;
                if (strategies_[n])
                    for (const Strategy &s : strategies_[n]->strategies) valid.push_back(s.var);
                valid.push_back("replicate");
                if (prefix && std::find(valid.begin(), valid.end(), var) == valid.end()) continue;
                TESSERA_CHECK(std::find(valid.begin(), valid.end(), var) != valid.end(), "--force '", pattern, "=",
                              var, "': ", g_.node(n).call.who(), " has no strategy '", var, "'; valid: ",
                              join(valid, ", "));
                forced_[n] = var;
            }
            TESSERA_CHECK(matched > 0, "--force '", pattern, "=", var, "': the training graph has no operator named '",
                          pattern, "' (tessera-plan --format table lists them)");
        }
    }

    // Which tensor groups PartitionOptions::weights fixes: each named weight's,
    // its gradients' and its optimizer state's.
    void match_weights() {
        weight_fix_.assign(co_.num_tensor_groups, std::nullopt);
        for (const auto &[pattern, layout] : opts_.weights) {
            int matched = 0;
            for (TensorId t = 0; t < g_.num_tensors(); t++) {
                if (g_.tensor(t).role != TensorRole::Param || !matches(pattern, g_.tensor(t).name)) continue;
                matched++;
                for (TensorId s : weight_states(t)) fix_group(co_.tensor_group[s], layout, g_.tensor(t).name);
            }
            TESSERA_CHECK(matched > 0, "--weights '", pattern, "': the training graph has no weight named '", pattern,
                          "' (tessera-plan --format table lists the tensors; weights have role param)");
        }
    }

    // A weight, its gradients, and the optimizer state its updates read and write.
    std::vector<TensorId> weight_states(TensorId w) const {
        std::vector<TensorId> out{w};
        for (TensorId t = 0; t < g_.num_tensors(); t++)
            if (t != w && primal_of(g_, t) == w && g_.tensor(t).role == TensorRole::Gradient) out.push_back(t);
        for (const Node &n : g_.nodes()) {
            if (!n.optimizer || std::find(n.inputs.begin(), n.inputs.end(), w) == n.inputs.end()) continue;
            for (TensorId t : n.inputs)
                if (is_weight_state(g_, t)) out.push_back(t);
            for (TensorId t : n.outputs)
                if (is_weight_state(g_, t)) out.push_back(t);
        }
        return out;
    }

    void fix_group(int gid, WeightLayout layout, const std::string &weight) {
        TESSERA_CHECK(!weight_fix_[gid] || *weight_fix_[gid] == layout, "--weights: '", weight,
                      "' is fixed both ways: by two entries, or by sharing its partition group with a weight fixed "
                      "the other way; fix them alike, or plan with --no-coarsen");
        weight_fix_[gid] = layout;
    }

    // A fixed weight's group keeps only the layouts of its fix: the splits, or
    // replicated and partial sums. A split fix with no dimension to split
    // leaves the group replicated, as any such tensor is.
    std::vector<Layout> keep_fixed(int gid, std::vector<Layout> all) const {
        if (!weight_fix_[gid]) return all;
        const bool split = *weight_fix_[gid] == WeightLayout::Split;
        std::vector<Layout> kept;
        for (const Layout &lay : all)
            if (lay.is_split() == split) kept.push_back(lay);
        return kept.empty() ? std::vector<Layout>{Layout::replicated()} : kept;
    }

    void keep_forced(NodeId n, std::vector<NodeOption> &options, int k, int level) const {
        const std::string &var = forced_[n];
        std::vector<NodeOption> kept;
        for (NodeOption &o : options) {
            const std::string mine = o.strategy == part::kAddPartialSums ? "partial"
                                     : o.strategy < 0                   ? "replicate"
                                                                        : strategies_[n]->strategies[o.strategy].var;
            if (mine == var) kept.push_back(std::move(o));
        }
        TESSERA_CHECK(!kept.empty(), "--force: ", g_.node(n).call.who(), " cannot split '", var, "' ", k,
                      " ways at level ", level + 1, ": its extent there is shorter than ", k,
                      ", or lowering cannot run that strategy (dropout's mask, a partial maximum)");
        options = std::move(kept);
    }

    // Data parallelism as DDP runs it: an operator reads its batch-split
    // activations where they are (a weight gradient is then a partial sum,
    // all-reduced), rather than gathering the batch to compute it whole. Only
    // where no option reads them in place do the others stay. Weights and
    // values derived from them alone may be held whole, so they do not count.
    // FSDP also keeps the outputs in place, so that an operator reading a
    // sharded weight in place (a matmul split by the weight's columns, its
    // input free to read whole from the host) cannot stand in for gathering it.
    void keep_in_place(NodeId n, std::vector<NodeOption> &options, const std::vector<Layout> &lay, int k) const {
        const Node &node = g_.node(n);
        const bool outputs_too = opts_.strategy == PartitionStrategy::Fsdp;
        std::vector<NodeOption> kept;
        for (const NodeOption &o : options) {
            bool in_place = true;
            each_conversion(n, o, lay, k, [&](size_t slot, const part::Conversion &conv) {
                const size_t ni = node.inputs.size();
                const int gid = slot < ni ? co_.tensor_group[node.inputs[slot]]
                                : outputs_too ? co_.tensor_group[node.outputs[slot - ni]]
                                              : -1;
                if (gid >= 0 && !persistent_[gid] && !weight_derived_[gid]) in_place = in_place && conv.bytes == 0;
            });
            if (in_place) kept.push_back(o);
        }
        if (!kept.empty()) options = std::move(kept);
    }

    CutSolution solve(const CutProblem &p) {
        if (opts_.solver) return opts_.solver(p);
        if (opts_.strategy == PartitionStrategy::Brute) return solve_brute(p, opts_.brute_force_limit);
        return solve_dp(p);
    }

    // The shortest block of an uneven split is the last: after nested
    // balanced splits the blocks differ by at most one element.
    static void shorten(TensorType &t, int dim, int k) { t.shape[dim] = block_size(t.shape[dim], k, k - 1); }

    // Options that would split an uneven split's shortest blocks into parts
    // of no element (10 over 2, 2, 2, 2: the blocks of 1 cannot split again).
    void drop_too_short(NodeId n, std::vector<NodeOption> &options, int k) const {
        std::erase_if(options, [&](const NodeOption &o) {
            if (o.strategy < 0) return false;
            const Strategy &s = strategies_[n]->strategies[o.strategy];
            if (part::variable_extent(s, o.inputs, in_min_[n], out_min_[n]) < k) return true;
            for (size_t j = 0; j < o.outputs.size(); j++)
                if (o.outputs[j].form == part::OutForm::Split && out_min_[n][j].shape[o.outputs[j].dim] < k) return true;
            return false;
        });
    }

    // The layouts each tensor group may take at this cut.
    std::vector<std::vector<Layout>> build_domains(int k, int level, std::vector<std::string> &notes) {
        std::vector<std::vector<Layout>> domains(co_.num_tensor_groups);
        int replicated_small = 0;
        for (int gid = 0; gid < co_.num_tensor_groups; gid++) {
            const TensorType &t = tshape_[members_[gid][0]];
            const TensorType &shortest = tmin_[members_[gid][0]];
            std::vector<Layout> all;
            for (int d = 0; d < t.rank(); d++)
                if (shortest.shape[d] >= k) all.push_back(Layout::split(d));  // uneven: blocks of ceil and floor size
            // Partial sums at an outer level stay partial or split here: a
            // replica inside them would convert each addend (lowering moves
            // them once per replica), which the recursion's c1 + k1 c2 + ...
            // does not count. Partial sums start at the outermost level.
            const bool inside_partial = level > 0 && group_layouts_[gid].back().is_partial();
            if (inside_partial) all.push_back(Layout::partial());
            if (all.empty()) {
                domains[gid] = {Layout::replicated()};
                if (t.elements() <= 1) replicated_small++;
                else note_replicated_tensor(gid, k, level, notes);
                continue;
            }
            const bool replicable =
                opts_.replicate_weights || weight_fix_[gid] == std::optional{WeightLayout::Replicate};
            if (!inside_partial && (persistent_[gid] || weight_derived_[gid]) && replicable)
                all.push_back(Layout::replicated());
            if (level == 0 && partial_ok_[gid] && replicable) all.push_back(Layout::partial());
            all = keep_fixed(gid, std::move(all));
            std::vector<Layout> kept;
            for (const Layout &lay : all)
                if (allowed(gid, lay, t, level)) kept.push_back(lay);
            domains[gid] = kept.empty() ? all : kept;
        }
        if (replicated_small > 0)
            notes.push_back("level " + std::to_string(level + 1) + ": " + std::to_string(replicated_small) +
                            " scalar tensors (loss, step counter, ...) are replicated");
        return domains;
    }

    bool data_parallel() const {
        return opts_.strategy == PartitionStrategy::DataParallel || opts_.strategy == PartitionStrategy::Ddp ||
               opts_.strategy == PartitionStrategy::Fsdp;
    }

    bool all_replicated(NodeId n, const std::vector<Layout> &lay) const {
        for (TensorId t : g_.node(n).inputs)
            if (lay[co_.tensor_group[t]].is_split()) return false;
        return true;
    }

    // The baselines, as restrictions of the same search.
    bool allowed(int gid, const Layout &lay, const TensorType &t, int level) const {
        switch (opts_.strategy) {
        case PartitionStrategy::DataParallel:
        case PartitionStrategy::Ddp:
            if (weight_derived_[gid] && lay == Layout::replicated()) return true;
            return persistent_[gid] || partial_ok_[gid] ? !lay.is_split() : lay == Layout::split(0);
        case PartitionStrategy::Fsdp:
            // Weight groups (a weight, its gradient and state) sharded along
            // any dimension long enough; the operators, batch-split as
            // data's, read them gathered (keep_in_place).
            if (partial_ok_[gid]) return lay.is_split();
            if (persistent_[gid] || (weight_derived_[gid] && lay == Layout::replicated())) return !lay.is_split();
            return lay == Layout::split(0);
        case PartitionStrategy::Owt:
            if (owt_matmul_weight_[gid]) return lay == Layout::split(t.rank() - 1);
            if (owt_fc_param_[gid]) return lay.is_split();
            if (persistent_[gid]) return !lay.is_split();
            if (owt_fc_activation_[gid]) return true;
            return lay == Layout::split(0);
        case PartitionStrategy::EqualChop:
            if (level == 0) return true;
            return lay == group_layouts_[gid][0];
        default: return true;
        }
    }

    // Groups of a value the forward pass computes from weights and constants
    // alone (an imported model's transposed weight, W^T, which its matmul
    // reads), and of that value's gradients: like a weight, they may be
    // replicated. Data parallelism may too, as DDP computes W^T on every
    // replica and all-reduces its gradient once; where the value is read
    // beside the batch (a broadcast position embedding), split(0) stays the
    // cheaper choice. A group qualifies only when all its members do: an
    // RNN's steps share a group, and one step's value computed from weights
    // alone must not let the others be held whole.
    void find_weight_derived_groups() {
        std::vector<bool> derived(g_.num_tensors(), false);
        for (const Node &n : g_.nodes()) {
            if (n.backward || n.optimizer) continue;
            bool from_weights = !n.inputs.empty();
            for (TensorId t : n.inputs)
                from_weights = from_weights && (is_persistent(g_.tensor(t).role) || derived[t]);
            for (TensorId t : n.outputs) derived[t] = from_weights && !is_persistent(g_.tensor(t).role);
        }
        auto qualifies = [&](TensorId t) {  // derived, or a gradient of a derived value
            TensorId primal = t;
            while (g_.tensor(primal).grad_of != kNoTensor) primal = g_.tensor(primal).grad_of;
            return derived[primal] && (primal == t || g_.tensor(t).role == TensorRole::Gradient);
        };
        weight_derived_.assign(co_.num_tensor_groups, false);
        std::vector<bool> all(co_.num_tensor_groups, true);
        for (TensorId t = 0; t < g_.num_tensors(); t++) {
            const int gid = co_.tensor_group[t];
            if (qualifies(t)) weight_derived_[gid] = true;
            else if (!is_persistent(g_.tensor(t).role)) all[gid] = false;
        }
        for (int gid = 0; gid < co_.num_tensor_groups; gid++) weight_derived_[gid] = weight_derived_[gid] && all[gid];
    }

    // Groups that may be held as partial sums: those of a weight's gradients,
    // holding nothing else but the weight and its optimizer state, which are
    // then replicated (layout_of_member).
    void find_partial_groups() {
        partial_ok_.assign(co_.num_tensor_groups, true);
        std::vector<bool> any(co_.num_tensor_groups, false);
        for (TensorId t = 0; t < g_.num_tensors(); t++) {
            const int gid = co_.tensor_group[t];
            if (is_weight_gradient(g_, t)) any[gid] = true;
            else if (!is_weight_state(g_, t)) partial_ok_[gid] = false;
        }
        for (int gid = 0; gid < co_.num_tensor_groups; gid++) partial_ok_[gid] = partial_ok_[gid] && any[gid];
    }

    // Tensor t's layout when its group's is lay[group].
    Layout tensor_layout(TensorId t, const std::vector<Layout> &lay) const {
        return layout_of_member(g_, t, lay[co_.tensor_group[t]]);
    }

    void classify_for_owt() {
        const int ng = co_.num_tensor_groups;
        owt_matmul_weight_.assign(ng, false);
        owt_fc_activation_.assign(ng, false);
        owt_fc_param_.assign(ng, false);
        for (const Node &n : g_.nodes()) {
            if (n.backward || n.optimizer) continue;
            bool mm = matmul_like(n.call.kind), emb = n.call.kind == OpKind::Embedding;
            if (!mm && !emb) continue;
            for (TensorId t : n.inputs) {
                int gid = co_.tensor_group[t];
                if (persistent_[gid]) owt_matmul_weight_[gid] = true;
                else if (mm) owt_fc_activation_[gid] = true;
            }
            for (TensorId t : n.outputs) owt_fc_activation_[co_.tensor_group[t]] = true;
        }
        for (const Node &n : g_.nodes()) {
            if (n.backward || n.optimizer) continue;
            bool touches_fc = false;
            for (TensorId t : n.inputs) touches_fc = touches_fc || owt_fc_activation_[co_.tensor_group[t]];
            if (!touches_fc) continue;
            for (TensorId t : n.inputs) {
                int gid = co_.tensor_group[t];
                if (persistent_[gid] && !owt_matmul_weight_[gid]) owt_fc_param_[gid] = true;
            }
        }
    }

    // Calls fn(slot, conversion) for each input (slots 0..) and output (slots
    // after the inputs) of node n run as option `o`, its tensors laid out as `lay`.
    template<typename Fn>
    void each_conversion(NodeId n, const NodeOption &o, const std::vector<Layout> &lay, int k, Fn &&fn) const {
        const Node &node = g_.node(n);
        for (size_t i = 0; i < node.inputs.size(); i++) {
            // Each rank reads the block it needs of a dataset tensor from the dataset.
            if (is_fed(g_.tensor(node.inputs[i]))) {
                fn(i, part::Conversion{CommKind::AllGather, 0});
                continue;
            }
            fn(i, part::input_conversion(tensor_layout(node.inputs[i], lay), o.inputs[i], in_[n][i], o.var_extent,
                                         k));
        }
        for (size_t j = 0; j < node.outputs.size(); j++) {
            // Partial sums are summed in the type part::partial_sum_type gives.
            const bool partial = o.outputs[j].form == part::OutForm::Partial;
            const TensorType t = partial ? part::partial_sum_type(g_, node.outputs[j], out_[n][j], !o.stages.empty())
                                         : out_[n][j];
            fn(node.inputs.size() + j, part::output_conversion(o.outputs[j], tensor_layout(node.outputs[j], lay), t, k));
        }
    }

    // Bytes option `o` of node n moves when its tensors are laid out as `lay`.
    int64_t option_cost(NodeId n, const NodeOption &o, const std::vector<Layout> &lay, int k) const {
        int64_t c = o.stage_bytes;
        each_conversion(n, o, lay, k, [&](size_t, const part::Conversion &conv) { c += conv.bytes; });
        return c;
    }

    // One factor per node over the distinct groups it touches: the cheapest
    // option for each combination of their layouts.
    CutProblem build_problem(const std::vector<std::vector<Layout>> &domains,
                             const std::vector<std::vector<NodeOption>> &options, int k) const {
        CutProblem p;
        for (const auto &d : domains) p.domain.push_back(static_cast<int>(d.size()));
        std::vector<Layout> lay(co_.num_tensor_groups);
        for (NodeId n = 0; n < g_.num_nodes(); n++) {
            const Node &node = g_.node(n);
            std::set<int> vs;
            for (TensorId t : node.inputs) vs.insert(co_.tensor_group[t]);
            for (TensorId t : node.outputs) vs.insert(co_.tensor_group[t]);
            Factor f;
            for (int v : vs)
                if (p.domain[v] > 1) f.vars.push_back(v);
            for (int v : vs)
                if (p.domain[v] == 1) lay[v] = domains[v][0];
            int64_t size = 1;
            for (int v : f.vars) size *= p.domain[v];
            f.table.resize(size);
            std::vector<int> idx(f.vars.size(), 0);
            for (int64_t e = 0; e < size; e++) {
                for (size_t s = 0; s < f.vars.size(); s++) lay[f.vars[s]] = domains[f.vars[s]][idx[s]];
                int64_t best = -1;
                for (const NodeOption &o : options[n]) {
                    int64_t c = option_cost(n, o, lay, k);
                    if (best < 0 || c < best) best = c;
                }
                f.table[e] = best;
                for (size_t s = 0; s < f.vars.size(); s++) {
                    if (++idx[s] < p.domain[f.vars[s]]) break;
                    idx[s] = 0;
                }
            }
            p.factors.push_back(std::move(f));
        }
        return p;
    }

    void record_steps(NodeId n, const NodeOption &o, const std::vector<Layout> &lay, int k, int level, int64_t groups,
                      int devices, const LinkLevel &link, Plan &plan) {
        const Node &node = g_.node(n);
        auto add = [&](CommKind kind, int64_t bytes, TensorId t, std::string what) {
            if (bytes == 0) return;
            double per_device = static_cast<double>(groups * bytes) / devices;
            plan.comm.push_back(CommStep{level, kind, node.call.name, t == kNoTensor ? "" : g_.tensor(t).name,
                                         std::move(what), groups * bytes,
                                         comm_steps(kind, k) * link.latency + per_device / link.bandwidth});
        };
        const size_t inputs = node.inputs.size();
        each_conversion(n, o, lay, k, [&](size_t slot, const part::Conversion &conv) {
            if (conv.bytes > 0) slot_converted_[n][slot] = true;
            if (slot < inputs) {
                const part::InputNeed &need = o.inputs[slot];
                const Layout wanted = need.split     ? Layout::split(need.dim)
                                      : need.partial ? Layout::partial()
                                                     : Layout::replicated();
                add(conv.kind, conv.bytes, node.inputs[slot],
                    "input " + std::to_string(slot) + ": " + tensor_layout(node.inputs[slot], lay).str() + " -> " +
                        wanted.str());
                return;
            }
            const size_t j = slot - inputs;
            const part::OutputForm &form = o.outputs[j];
            std::string from = form.form == part::OutForm::Split     ? Layout::split(form.dim).str()
                               : form.form == part::OutForm::Partial ? "partial sums"
                                                                     : "split";
            add(conv.kind, conv.bytes, node.outputs[j],
                "output " + std::to_string(j) + ": " + from + " -> " + tensor_layout(node.outputs[j], lay).str());
        });
        if (o.stage_bytes > 0) {
            std::string stages;
            for (const auto &s : o.stages) stages += (stages.empty() ? "" : ", ") + s;
            add(CommKind::AllReduce, o.stage_bytes, kNoTensor, "inside the operator: " + stages);
        }
    }

    void note_replicated_tensor(int gid, int k, int level, std::vector<std::string> &notes) {
        const TensorInfo &t = g_.tensor(members_[gid][0]);
        if (++noted_tensors_ > kMaxNotes) return;
        notes.push_back("level " + std::to_string(level + 1) + " (" + std::to_string(k) + "-way): tensor '" + t.name +
                        "' " + type_str(t.type) + " has local shape " + shape_str(tshape_[members_[gid][0]].shape) +
                        (tmin_[members_[gid][0]] == tshape_[members_[gid][0]]
                             ? std::string()
                             : " (shortest block " + shape_str(tmin_[members_[gid][0]].shape) + ")") +
                        " with no dimension of at least " + std::to_string(k) + " elements; it is replicated");
    }

    void note_replicated_op(NodeId n, int k, int level, std::vector<std::string> &notes) {
        if (++noted_ops_ > kMaxNotes) return;
        notes.push_back("level " + std::to_string(level + 1) + " (" + std::to_string(k) + "-way): " +
                        g_.node(n).call.who() + " has no strategy it can split " + std::to_string(k) + " ways" +
                        "; every device computes it whole");
    }

    static constexpr int kMaxNotes = 40;
    const Graph &g_;
    const PartitionOptions &opts_;
    Coarsening co_;
    std::vector<TensorType> tshape_;                    // tensor-side local types
    std::vector<const OpStrategies *> strategies_;
    std::vector<std::vector<TensorType>> in_, out_;     // op-side local types
    // The same for the shortest blocks of uneven splits (the longest are above).
    std::vector<TensorType> tmin_;
    std::vector<std::vector<TensorType>> in_min_, out_min_;
    std::vector<std::vector<TensorId>> members_;
    std::vector<bool> persistent_, partial_ok_, owt_matmul_weight_, owt_fc_activation_, owt_fc_param_;
    std::vector<bool> weight_derived_;  // per tensor group: see find_weight_derived_groups
    std::vector<std::vector<Layout>> group_layouts_;
    std::vector<std::vector<std::string>> node_labels_;
    std::vector<std::vector<bool>> slot_converted_;
    std::vector<std::string> forced_;  // per node: the forced variable, or ""
    std::vector<std::optional<WeightLayout>> weight_fix_;  // per tensor group: PartitionOptions::weights

    int noted_tensors_ = 0, noted_ops_ = 0;
};

// The most bytes of the selected non-persistent tensors live at once when the
// nodes run in graph order: a tensor lives from its producer (or the start, for
// data) to its last reader.
int64_t peak_live_bytes(const Graph &g, const std::vector<int64_t> &bytes, const std::vector<bool> &counted) {
    const int nn = g.num_nodes();
    std::vector<int64_t> delta(nn + 2, 0);
    auto consumers = g.consumers();
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (!counted[t] || is_persistent(info.role) || info.updates != kNoTensor) continue;
        int first = info.producer == kNoNode ? 0 : info.producer;
        int last = consumers[t].empty() ? first : consumers[t].back();
        delta[first] += bytes[t];
        delta[last + 1] -= bytes[t];
    }
    int64_t live = 0, peak = 0;
    for (int i = 0; i <= nn; i++) {
        live += delta[i];
        peak = std::max(peak, live);
    }
    return peak;
}

// A reduced-precision working copy: a cast of a weight or a constant.
bool is_working_copy(const Graph &g, TensorId t) {
    const NodeId p = g.tensor(t).producer;
    return p != kNoNode && g.node(p).call.kind == OpKind::Cast && is_persistent(g.tensor(g.node(p).inputs[0]).role);
}

// Weights, optimizer state, parameter gradients (all of them: the updates run
// last), the peak of the working copies, and the peak of everything else.
MemoryFootprint footprint(const Graph &g, const std::vector<int64_t> &bytes) {
    MemoryFootprint m;
    std::vector<bool> activation(g.num_tensors(), false), working(g.num_tensors(), false);
    // A weight's complete gradient is the one an optimizer reads; partial
    // contributions to it are short-lived, like activations.
    std::vector<bool> read_by_optimizer(g.num_tensors(), false);
    for (const Node &n : g.nodes())
        if (n.optimizer)
            for (TensorId t : n.inputs) read_by_optimizer[t] = true;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.updates != kNoTensor) continue;  // shares its weight's storage
        switch (info.role) {
        case TensorRole::Param:
        case TensorRole::Constant: m.weights += bytes[t]; break;
        case TensorRole::OptState: m.optimizer_state += bytes[t]; break;
        case TensorRole::Gradient:
            if (g.tensor(primal_of(g, t)).role == TensorRole::Param && read_by_optimizer[t]) m.gradients += bytes[t];
            else activation[t] = true;
            break;
        default: (is_working_copy(g, t) ? working : activation)[t] = true;
        }
    }
    m.activations = peak_live_bytes(g, bytes, activation);
    m.working_copies = peak_live_bytes(g, bytes, working);
    return m;
}

// "A=B,C=D" as its pairs; throws naming `flag` and the bad entry.
std::vector<std::pair<std::string, std::string>> split_assignments(const std::string &text, const char *flag,
                                                                   const char *expected) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t at = 0;
    while (at <= text.size()) {
        size_t end = text.find(',', at);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(at, end - at);
        size_t eq = item.find('=');
        TESSERA_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), flag, ": bad entry '", item,
                      "'; expected ", expected);
        out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
        at = end + 1;
    }
    return out;
}

}  // namespace

const char *partition_strategy_name(PartitionStrategy s) { return kStrategyNames[static_cast<int>(s)]; }

std::vector<std::string> partition_strategy_names() { return {std::begin(kStrategyNames), std::end(kStrategyNames)}; }

PartitionStrategy partition_strategy_from_name(const std::string &name) {
    for (int i = 0; i < static_cast<int>(std::size(kStrategyNames)); i++)
        if (name == kStrategyNames[i]) return static_cast<PartitionStrategy>(i);
    fail("unknown partition strategy '", name, "' (valid: tofu, data, ddp, fsdp, owt, equalchop, brute)");
}

std::vector<std::pair<std::string, std::string>> parse_force(const std::string &text) {
    return split_assignments(text, "--force", "OPERATOR=VARIABLE, e.g. 'bn1=n' or 'block1.conv1=oh'");
}

WeightLayouts parse_weights(const std::string &text) {
    WeightLayouts out;
    for (const auto &[name, value] : split_assignments(text, "--weights", "WEIGHT=replicate|split, e.g. 'fc1.w=split'")) {
        TESSERA_CHECK(value == "replicate" || value == "split", "--weights '", name, "=", value,
                      "': a weight is 'replicate' or 'split'");
        out.emplace_back(name, value == "split" ? WeightLayout::Split : WeightLayout::Replicate);
    }
    return out;
}

std::string format_weights(const WeightLayouts &weights) {
    std::string out;
    for (const auto &[name, layout] : weights)
        out += (out.empty() ? "" : ",") + name + (layout == WeightLayout::Split ? "=split" : "=replicate");
    return out;
}

Plan partition(const Graph &g, const Machine &machine, const PartitionOptions &options) {
    auto start = std::chrono::steady_clock::now();
    TESSERA_CHECK(!machine.levels.empty(), "the machine description has no levels");
    Plan plan;
    plan.model = options.model;
    plan.strategy = partition_strategy_name(options.strategy);
    plan.machine = machine;
    plan.devices = machine.devices();
    if (options.cuts.empty()) {
        plan.cuts = machine_cuts(machine);
    } else {
        int product = 1;
        for (int k : options.cuts) {
            TESSERA_CHECK(k >= 2, "a cut must split at least 2 ways, got ", k);
            plan.cuts.push_back(Cut{k, 0});
            product *= k;
        }
        TESSERA_CHECK(product == plan.devices, "the cuts multiply to ", product, ", but the machine has ",
                      plan.devices, " devices");
    }

    Search search(g, options);
    search.run(plan.cuts, machine, plan);
    const Coarsening &co = search.coarsening();
    plan.ops_before_coarsening = g.num_nodes();
    plan.ops_after_coarsening = co.num_op_groups;
    plan.tensors_before_coarsening = g.num_tensors();
    plan.tensors_after_coarsening = co.num_tensor_groups;
    for (int64_t b : plan.level_bytes) plan.search_bytes += b;
    plan.comm_bytes = plan.search_bytes;
    for (const CommStep &s : plan.comm) plan.predicted_comm_time_s += s.time_s;
    if (search.notes_dropped() > 0)
        plan.notes.push_back("... and " + std::to_string(search.notes_dropped()) + " more like these");

    for (NodeId n = 0; n < g.num_nodes(); n++) {
        const Node &node = g.node(n);
        OpPlan o{node.call.name, op_name(node.call.kind), co.op_group[n], search.node_labels()[n], {}, {}};
        for (TensorId t : node.inputs) o.inputs.push_back(g.tensor(t).name);
        for (TensorId t : node.outputs) o.outputs.push_back(g.tensor(t).name);
        plan.ops.push_back(std::move(o));
    }
    std::vector<int64_t> local(g.num_tensors()), whole(g.num_tensors());
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        int gid = co.tensor_group[t];
        const TensorType &lt = search.local_types()[t];
        local[t] = lt.bytes();
        whole[t] = info.type.bytes();
        plan.tensors.push_back(TensorPlan{info.name, role_name(info.role), info.type.shape, lt.shape, gid,
                                          search.tensor_layouts(t), whole[t], local[t], dtype_name(info.type.dtype)});
    }
    plan.memory = footprint(g, local);
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        int64_t buffers = 0;
        const auto &conv = search.slot_converted()[n];
        const auto &in = search.local_inputs()[n];
        const auto &out = search.local_outputs()[n];
        for (size_t i = 0; i < in.size(); i++)
            if (conv[i]) buffers += in[i].bytes();
        for (size_t j = 0; j < out.size(); j++)
            if (conv[in.size() + j]) buffers += out[j].bytes();
        plan.memory.comm_buffers = std::max(plan.memory.comm_buffers, buffers);
    }
    plan.per_device_peak_bytes = plan.memory.total();
    plan.single_device_peak_bytes = footprint(g, whole).total();
    TESSERA_CHECK(options.bucket_bytes >= 0, "the bucket size for fused collectives is ", options.bucket_bytes,
                  " bytes; it must be at least 0 (0: no fusion)");
    plan.bucket_bytes = options.bucket_bytes;
    plan.local_batch_norm = local_batch_norm(options);
    if (options.executable) {
        plan.executable = true;
        plan.rank_comm_bytes = lowered_comm_bytes(g, plan);
        plan.comm_bytes = plan.lowered_comm_bytes();
    }
    plan.search_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return plan;
}

int64_t bucket_bytes_within(int64_t bucket_bytes, int64_t device_bytes) {
    constexpr int64_t kDevicePerBucket = 16;
    if (bucket_bytes <= 0 || device_bytes <= 0) return bucket_bytes;
    return std::max<int64_t>(1, std::min(bucket_bytes, device_bytes / kDevicePerBucket));
}

}  // namespace tessera
