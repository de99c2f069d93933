// tessera-strategyc: derives every operator's partition strategies from its Halide
// description, with Halide's bounds inference, and writes them as plain data.
//
// This is Tofu's symbolic interval analysis. For one index variable D of an
// operator, its range is replaced by the symbolic interval [lo, lo + w] and
// Halide's boxes_required() is asked which region of every producer each stage
// needs, from the outputs back to the inputs. Pure Vars and RDoms that share D's
// name take the split range; a stage whose RDom is split computes a partial result
// (a partial sum, max or min) that must be reduced across devices.
//
// Each input region is then classified per dimension. Symbols (extents and
// attributes) are taken to be non-negative, which lets min/max of two affine
// bounds be resolved by the sign of their difference. A dimension is split when
// its bounds are [A*lo + B, A*(lo + w) + C]; it needs a halo of C - B - A + 1
// (the overlap of neighbouring parts). A region that does not depend on D means
// the input is replicated; a region that is unbounded (an index read from data)
// or not affine means the whole input is needed.
//
// Usage: tessera-strategyc --json FILE --cpp FILE; TESSERA_STRATEGYC_DEBUG=1 also
// prints the regions behind each strategy (debug_regions()).
#include <fstream>
#include <iostream>
#include <optional>

#include "../defs/defs.h"
#include "../src/strategy_json.h"
#include "tessera/tunables.h"

using namespace Halide;
using namespace Halide::Internal;
using namespace tessera::lang::defs;
using tessera::InputNeed;
using tessera::NeedKind;
using tessera::OpStrategies;
using tessera::OutKind;
using tessera::OutputResult;
using tessera::StageReduction;
using tessera::Strategy;
using tessera::SymPoly;

namespace {

const char *kLo = "split.lo";
const char *kW = "split.w";

// ---- Polynomials over non-negative symbols -------------------------------------

using Poly = std::map<std::vector<std::string>, int64_t>;

Poly poly_add(Poly a, const Poly &b, int64_t sign = 1) {
    for (const auto &[m, c] : b) {
        a[m] += sign * c;
        if (a[m] == 0) a.erase(m);
    }
    return a;
}

Poly poly_mul(const Poly &a, const Poly &b) {
    Poly r;
    for (const auto &[ma, ca] : a)
        for (const auto &[mb, cb] : b) {
            std::vector<std::string> m = ma;
            m.insert(m.end(), mb.begin(), mb.end());
            std::sort(m.begin(), m.end());
            r[m] += ca * cb;
            if (r[m] == 0) r.erase(m);
        }
    return r;
}

// +1 if p >= 0 for all non-negative symbols, -1 if p <= 0, 0 if unknown.
int poly_sign(const Poly &p) {
    bool nonneg = true, nonpos = true;
    for (const auto &[m, c] : p) {
        if (c < 0) nonneg = false;
        if (c > 0) nonpos = false;
    }
    return nonneg ? 1 : (nonpos ? -1 : 0);
}

std::optional<Poly> to_poly(const Expr &e) {
    if (const IntImm *i = e.as<IntImm>()) return i->value == 0 ? Poly{} : Poly{{{}, i->value}};
    if (const Variable *v = e.as<Variable>()) return Poly{{{v->name}, 1}};
    if (const Cast *c = e.as<Cast>()) {
        if (c->type.is_int() && c->value.type().is_int()) return to_poly(c->value);
        return std::nullopt;
    }
    auto binary = [&](const Expr &a, const Expr &b) -> std::optional<std::pair<Poly, Poly>> {
        auto pa = to_poly(a), pb = to_poly(b);
        if (!pa || !pb) return std::nullopt;
        return std::make_pair(*pa, *pb);
    };
    if (const Add *op = e.as<Add>()) {
        if (auto p = binary(op->a, op->b)) return poly_add(p->first, p->second);
    } else if (const Sub *op = e.as<Sub>()) {
        if (auto p = binary(op->a, op->b)) return poly_add(p->first, p->second, -1);
    } else if (const Mul *op = e.as<Mul>()) {
        if (auto p = binary(op->a, op->b)) return poly_mul(p->first, p->second);
    } else if (const Min *op = e.as<Min>()) {
        if (auto p = binary(op->a, op->b)) {
            int s = poly_sign(poly_add(p->first, p->second, -1));
            if (s < 0) return p->first;
            if (s > 0) return p->second;
        }
    } else if (const Max *op = e.as<Max>()) {
        if (auto p = binary(op->a, op->b)) {
            int s = poly_sign(poly_add(p->first, p->second, -1));
            if (s > 0) return p->first;
            if (s < 0) return p->second;
        }
    }
    return std::nullopt;
}

bool mentions(const Poly &p, const std::string &sym) {
    for (const auto &[m, c] : p)
        if (std::count(m.begin(), m.end(), sym)) return true;
    return false;
}

// Splits p into coef*sym + rest; fails if sym appears other than linearly.
bool linear_in(const Poly &p, const std::string &sym, Poly &coef, Poly &rest) {
    coef.clear();
    rest.clear();
    for (const auto &[m, c] : p) {
        long n = std::count(m.begin(), m.end(), sym);
        if (n == 0) rest[m] = c;
        else if (n == 1) {
            std::vector<std::string> mm = m;
            mm.erase(std::find(mm.begin(), mm.end(), sym));
            coef[mm] += c;
        } else return false;
    }
    return true;
}

SymPoly to_sym(const Poly &p) {
    SymPoly s;
    for (const auto &[m, c] : p) s.terms.push_back({c, m});
    return s;
}

// ---- The analysis context: placeholders and symbols ------------------------------

class AnalysisCtx : public Ctx {
public:
    explicit AnalysisCtx(StructMap s) : Ctx(std::move(s)) {}

    Func input(int i, Type t, int rank, Boundary) override {
        auto it = inputs_.find(i);
        if (it != inputs_.end()) return it->second;
        ImageParam p(t, rank, "ip" + std::to_string(i));
        Func f("input_" + std::to_string(i));
        std::vector<Var> v = dim_vars(rank, "a");
        f(v) = p(as_exprs(v));
        ranks_[i] = rank;
        return inputs_.emplace(i, f).first->second;
    }
    Expr extent(int i, int d) override { return param("in" + std::to_string(i) + "." + std::to_string(d), Int(32)); }
    Expr param_int(const std::string &name) override { return param(name, Int(32)); }
    Expr param_float(const std::string &name) override { return param(name, Float(32)); }
    bool scheduling() const override { return false; }
    const Target &target() const override { return target_; }
    Func stage(Func f) override {
        stages_.push_back(f.name().substr(0, f.name().find('$')));
        return f;
    }
    const std::vector<std::string> &stages() const { return stages_; }
    const std::map<int, int> &ranks() const { return ranks_; }
    std::string input_name(int i) const { return inputs_.at(i).name(); }

private:
    Expr param(const std::string &name, Type t) {
        auto it = params_.find(name);
        if (it == params_.end()) it = params_.emplace(name, Parameter(t, false, 0, name)).first;
        return Variable::make(t, name, it->second);
    }
    Target target_ = get_host_target();
    std::map<int, Func> inputs_;
    std::map<int, int> ranks_;
    std::map<std::string, Parameter> params_;
    std::vector<std::string> stages_;
};

// ---- Walking the stages of a description ----------------------------------------

class CollectCalls : public IRGraphVisitor {
public:
    std::vector<Function> callees;
    bool data_dependent = false;

private:
    using IRGraphVisitor::visit;
    int depth_ = 0;
    void visit(const Call *op) override {
        if (op->call_type == Call::Halide || op->call_type == Call::Image) {
            if (depth_ > 0) data_dependent = true;  // an index computed from a load
            if (op->call_type == Call::Halide) callees.emplace_back(op->func);
            depth_++;
            for (const Expr &a : op->args) a.accept(this);
            depth_--;
            return;
        }
        IRGraphVisitor::visit(op);
    }
};

// Halide makes repeated Func names unique with a "$N" suffix; tables show the plain name.
std::string plain_name(const std::string &n) { return n.substr(0, n.find('$')); }

bool is_leaf(const Function &f) { return plain_name(f.name()).rfind("input_", 0) == 0; }

std::vector<Expr> def_exprs(const Definition &d) {
    std::vector<Expr> e = d.values();
    e.insert(e.end(), d.args().begin(), d.args().end());
    return e;
}

// Stages in consumer-before-producer order.
std::vector<Function> stage_order(const std::vector<Func> &outputs, bool &opaque,
                                  std::map<std::string, std::set<std::string>> &consumers) {
    std::vector<Function> post;
    std::set<std::string> seen;
    std::function<void(const Function &)> dfs = [&](const Function &f) {
        if (!seen.insert(f.name()).second) return;
        if (!is_leaf(f)) {
            std::vector<Definition> defs = {f.definition()};
            defs.insert(defs.end(), f.updates().begin(), f.updates().end());
            for (const Definition &d : defs)
                for (const Expr &e : def_exprs(d)) {
                    CollectCalls c;
                    e.accept(&c);
                    opaque = opaque || c.data_dependent;
                    for (const Function &g : c.callees) {
                        if (g.name() != f.name()) consumers[g.name()].insert(f.name());
                        dfs(g);
                    }
                }
        }
        post.push_back(f);
    };
    for (const Func &o : outputs) dfs(o.function());
    std::reverse(post.begin(), post.end());
    return post;
}

std::string base_name(const std::string &rvar) { return rvar_dim_name(rvar); }

// Reduction kind of an update that combines into its own Func, or "".
std::string reduce_kind(const Function &f, const Definition &u) {
    if (u.values().size() != 1) return "";
    auto is_self = [&](const Expr &e) {
        const Call *c = e.as<Call>();
        return c && c->call_type == Call::Halide && c->name == f.name();
    };
    // Halide hoists repeated subexpressions into Lets; look through them.
    const Expr v = substitute_in_all_lets(u.values()[0]);
    if (const Add *a = v.as<Add>(); a && (is_self(a->a) || is_self(a->b))) return "sum";
    if (const Max *a = v.as<Max>(); a && (is_self(a->a) || is_self(a->b))) return "max";
    if (const Min *a = v.as<Min>(); a && (is_self(a->a) || is_self(a->b))) return "min";
    return "";
}

// TESSERA_STRATEGYC_DEBUG=1 prints, for every candidate, the stage order, the
// Funcs whose regions were derived, and each input's region: what a surprising
// strategy was derived from. Default 0.
bool debug_regions() {
    static const bool on = tessera::env_choice("TESSERA_STRATEGYC_DEBUG", {"0", "1"}, "0", "value") == "1";
    return on;
}

using Consumers = std::map<std::string, std::set<std::string>>;

Interval split_interval() {
    Expr lo = Variable::make(Int(32), kLo), w = Variable::make(Int(32), kW);
    return Interval(lo, lo + w);
}

// What the walk from the outputs back to the inputs found for one candidate
// index variable D.
struct Regions {
    // D's range, [lo, lo + w]: one Expr in every region, so that merging two
    // regions that use it finds them the same.
    const Interval split = split_interval();
    std::map<std::string, Box> required;         // Func -> the region of it the split outputs need
    std::map<std::string, std::string> partial;  // stage -> reduce kind, for stages whose RDom is split
    bool reduction_var = false;                  // D names an RDom
};

// Binds f's pure Vars to the region `B` of f that is needed, and each RDom of
// `d` to its whole range, or to `split` when it is D. True when an RDom is split.
bool bind_vars(const Function &f, const Definition &d, const Box &B, const std::string &D, const Interval &split,
               Scope<Interval> &scope) {
    for (int k = 0; k < f.dimensions(); k++) scope.push(f.args()[k], B[k]);
    bool split_rvar = false;
    for (const ReductionVariable &rv : d.schedule().rvars()) {
        if (base_name(rv.var) == D) {
            scope.push(rv.var, split);
            split_rvar = true;
        } else {
            scope.push(rv.var, Interval(rv.min, simplify(rv.min + rv.extent - 1)));
        }
    }
    return split_rvar;
}

// Definition `di` of stage f (0 the pure one, then its updates), of which
// region `B` is needed: adds the regions of its producers it reads to `r`.
// Returns why the stage cannot be split along D, or "".
std::string walk_definition(const Function &f, const Definition &d, size_t di, const Box &B, const std::string &D,
                            Regions &r) {
    Scope<Interval> scope;
    const bool split_rvar = bind_vars(f, d, B, D, r.split, scope);
    if (di > 0) {
        for (int k = 0; k < f.dimensions(); k++) {
            const Variable *v = d.args()[k].as<Variable>();
            bool pure = v && v->name == f.args()[k];
            if (!pure && f.args()[k] == D)
                return "an update of '" + plain_name(f.name()) + "' writes positions along '" + D +
                       "' that depend on data or on a reduction";
        }
    }
    if (split_rvar) {
        std::string kind = di > 0 ? reduce_kind(f, d) : "";
        if (kind.empty())
            return "stage '" + plain_name(f.name()) + "' iterates over '" + D +
                   "' in a way that is not a sum, max or min reduction";
        r.partial[f.name()] = kind;
        r.reduction_var = true;
    }
    for (const Expr &e : def_exprs(d)) {
        for (auto &[name, box] : boxes_required(e, scope)) {
            if (name == f.name()) continue;
            auto it = r.required.find(name);
            if (it == r.required.end()) r.required[name] = box;
            else merge_boxes(it->second, box);
        }
    }
    return "";
}

// The outputs split along D (whole elsewhere), then every stage, consumers
// first, asked with bounds inference which regions of its producers it needs.
// Returns why D cannot be split, or "".
std::string required_regions(const OpDef &def, const std::vector<Function> &order, const std::string &D,
                             Regions &r) {
    for (size_t o = 0; o < def.outputs.size(); o++) {
        const Function f = def.outputs[o].function();
        int rank = f.dimensions();
        Box b;
        for (int k = 0; k < rank; k++)
            b.push_back(f.args()[k] == D ? r.split
                                         : Interval(0, simplify(def.output_extents[o][rank - 1 - k] - 1)));
        r.required[f.name()] = b;
    }
    for (const Function &f : order) {
        if (is_leaf(f) || !r.required.count(f.name())) continue;
        Box B = r.required[f.name()];
        std::vector<Definition> defs = {f.definition()};
        defs.insert(defs.end(), f.updates().begin(), f.updates().end());
        for (size_t di = 0; di < defs.size(); di++) {
            std::string why = walk_definition(f, defs[di], di, B, D, r);
            if (!why.empty()) return why;
        }
    }
    return "";
}

enum class DimSplit { Unaffected, Whole, Split };

// How the split narrows one dimension of an input's region: not at all, not
// in a way a device can use (the whole dimension is needed), or to
// [A*lo + B, A*(lo + w) + C], which is written into `need` (all but its dim).
DimSplit split_of_dim(const Interval &iv, InputNeed &need) {
    if (!iv.is_bounded()) return DimSplit::Whole;  // an index read from data: cannot narrow this dimension
    Expr mn = simplify(iv.min), mx = simplify(iv.max);
    bool dep = expr_uses_var(mn, kLo) || expr_uses_var(mn, kW) || expr_uses_var(mx, kLo) || expr_uses_var(mx, kW);
    if (!dep) return DimSplit::Unaffected;
    auto pmin = to_poly(mn), pmax = to_poly(mx);
    Poly a, b, a1, r1, a2, c;
    if (!pmin || !pmax || mentions(*pmin, kW) || !linear_in(*pmin, kLo, a, b) || !linear_in(*pmax, kLo, a1, r1) ||
        !linear_in(r1, kW, a2, c) || a != a1 || a != a2 || a.empty() || mentions(b, kLo) || mentions(c, kLo))
        return DimSplit::Whole;
    need.kind = NeedKind::Split;
    need.scale = to_sym(a);
    need.lo_offset = to_sym(b);
    need.hi_offset = to_sym(c);
    need.halo = to_sym(poly_add(poly_add(poly_add(c, b, -1), a, -1), Poly{{{}, 1}}));
    return DimSplit::Split;
}

// An input is split when exactly one dimension of its region is, and no
// dimension needs the whole; otherwise it is replicated (InputNeed{}).
InputNeed input_need(const Box &box, int rank) {
    InputNeed need;
    int split_dims = 0;
    bool whole = false;
    for (int k = 0; k < rank; k++) {
        switch (split_of_dim(box[k], need)) {
        case DimSplit::Unaffected: break;
        case DimSplit::Whole: whole = true; break;
        case DimSplit::Split:
            split_dims++;
            need.dim = rank - 1 - k;
            break;
        }
    }
    return whole || split_dims != 1 ? InputNeed{} : need;
}

// An output that only copies a partial stage (a GEMM's accumulator) is partial
// too, but only when nothing else reads the partial stage: another consumer
// needs the reduced value, so the all-reduce must stay. The stage output `f`
// copies so, or "".
std::string copied_partial(const Function &f, const Consumers &consumers,
                           const std::map<std::string, std::string> &partial) {
    if (partial.count(f.name()) || !f.updates().empty() || f.values().size() != 1) return "";
    const Call *c = f.values()[0].as<Call>();
    auto cons = c ? consumers.find(c->name) : consumers.end();
    bool sole = cons != consumers.end() && cons->second.size() == 1;
    bool copy = c && c->call_type == Call::Halide && partial.count(c->name) && sole &&
                static_cast<int>(c->args.size()) == f.dimensions();
    for (int k = 0; copy && k < f.dimensions(); k++) {
        const Variable *v = c->args[k].as<Variable>();
        copy = v && v->name == f.args()[k];
    }
    return copy ? c->name : "";
}

// Output `f` split along D, partial (its stage's reduction moved from
// `partial` to the result), or replicated.
OutputResult output_result(const Function &f, const std::string &D, const Consumers &consumers,
                           std::map<std::string, std::string> &partial) {
    OutputResult r;
    for (int k = 0; k < f.dimensions(); k++)
        if (f.args()[k] == D) {
            r.kind = OutKind::Split;
            r.dim = f.dimensions() - 1 - k;
        }
    const std::string copied = copied_partial(f, consumers, partial);
    if (!copied.empty()) {
        partial[f.name()] = partial[copied];
        partial.erase(copied);
    }
    if (partial.count(f.name())) {
        r.kind = OutKind::Partial;
        r.reduce = partial[f.name()];
        partial.erase(f.name());
    }
    return r;
}

// The stages left partial, reduced across devices, in dependency order
// (producers first: a variance needs its mean), each with its element count.
std::vector<StageReduction> stage_reductions(const std::vector<Function> &order,
                                             const std::map<std::string, std::string> &partial,
                                             const std::map<std::string, Box> &required) {
    std::vector<StageReduction> out;
    for (auto f = order.rbegin(); f != order.rend(); ++f) {
        auto p = partial.find(f->name());
        if (p == partial.end()) continue;
        const std::string &stage = p->first, &kind = p->second;
        StageReduction red{plain_name(stage), kind, {}, f->output_types()[0].bytes()};
        auto it = required.find(stage);
        const Box b = it == required.end() ? Box() : it->second;
        Poly elements{{{}, 1}};
        bool ok = true;
        for (size_t k = 0; k < b.size() && ok; k++) {
            auto n = b[k].is_bounded() ? to_poly(simplify(b[k].max - b[k].min + 1)) : std::nullopt;
            if (n) elements = poly_mul(elements, *n);
            else ok = false;
        }
        if (ok) red.elements = to_sym(elements);
        out.push_back(red);
    }
    return out;
}

void print_regions(const std::vector<Function> &order, const std::map<std::string, Box> &required) {
    std::cerr << "variant stage order:";
    for (const Function &f : order) std::cerr << " " << f.name();
    std::cerr << "\n required:";
    for (auto &[k, v] : required) std::cerr << " " << k;
    std::cerr << "\n";
}

struct Analysis {
    std::optional<Strategy> strategy;
    std::string why;  // when rejected
};

// The strategy that splits index variable D, or why there is none.
Analysis analyse(const OpDef &def, const std::vector<Function> &order, const AnalysisCtx &ctx,
                 const Consumers &consumers, const std::string &D) {
    Regions r;
    if (std::string why = required_regions(def, order, D, r); !why.empty()) return {std::nullopt, why};
    if (debug_regions()) print_regions(order, r.required);
    Strategy s;
    s.var = D;
    s.reduction_var = r.reduction_var;
    bool any_split = false;
    for (const auto &[i, rank] : ctx.ranks()) {
        InputNeed need;
        auto it = r.required.find(ctx.input_name(i));
        if (it != r.required.end()) {
            if (debug_regions()) std::cerr << "  " << D << " input_" << i << ": " << it->second << "\n";
            need = input_need(it->second, rank);
        }
        any_split = any_split || need.kind == NeedKind::Split;
        s.inputs.push_back(need);
    }
    bool any_out = false;
    for (const Func &out : def.outputs) {
        OutputResult o = output_result(out.function(), D, consumers, r.partial);
        any_out = any_out || o.kind != OutKind::Replicated;
        s.outputs.push_back(o);
    }
    s.reductions = stage_reductions(order, r.partial, r.required);
    if (!any_split && !any_out) return {std::nullopt, "splitting it divides neither an input nor an output"};
    return {s, ""};
}

// Lowering runs a strategy that reduces inside the operator through its staged
// kernels, which exist only for the stages the description marks.
void check_stages_marked(const Strategy &s, const OpStrategies &variant) {
    size_t next = 0;
    for (const StageReduction &r : s.reductions) {
        auto it = std::find(variant.stages.begin() + next, variant.stages.end(), r.stage);
        if (it == variant.stages.end())
            throw std::runtime_error(variant.variant + ": splitting '" + s.var + "' makes stage '" + r.stage +
                                     "' a cross-device reduction, but the description does not mark it with "
                                     "Ctx::stage() (after the stages it depends on)");
        next = static_cast<size_t>(it - variant.stages.begin()) + 1;
    }
}

OpStrategies analyse_variant(const Description &d, const StructMap &sm) {
    AnalysisCtx ctx(sm);
    OpDef def = d.define(ctx);
    OpStrategies result;
    result.variant = tessera::variant_key(d.op, sm);
    result.stages = ctx.stages();
    std::map<std::string, std::set<std::string>> consumers;
    std::vector<Function> order = stage_order(def.outputs, result.opaque, consumers);

    // Candidate index variables: the outputs' pure vars and every RDom, by name.
    std::vector<std::string> candidates;
    auto add = [&](const std::string &n) {
        if (std::find(candidates.begin(), candidates.end(), n) == candidates.end()) candidates.push_back(n);
    };
    for (const Func &o : def.outputs) {
        const auto args = o.function().args();
        for (auto it = args.rbegin(); it != args.rend(); ++it) add(*it);  // outermost first
    }
    for (const Function &f : order)
        for (const Definition &u : f.updates())
            for (const ReductionVariable &rv : u.schedule().rvars()) add(base_name(rv.var));
    for (const std::string &D : candidates) {
        Analysis a = analyse(def, order, ctx, consumers, D);
        if (a.strategy) check_stages_marked(*a.strategy, result);
        if (a.strategy) result.strategies.push_back(*a.strategy);
        else result.rejected.emplace_back(D, a.why);
    }
    return result;
}

}  // namespace

int main(int argc, char **argv) {
    std::string json_path, cpp_path;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--cpp" && i + 1 < argc) cpp_path = argv[++i];
        else {
            std::cerr << "tessera-strategyc: unknown argument '" << a << "'\n";
            return 2;
        }
    }
    try {
        nlohmann::json all = nlohmann::json::array();
        for (const Description &d : descriptions())
            for (const StructMap &sm : d.analysis_variants) all.push_back(tessera::to_json(analyse_variant(d, sm)));
        std::string text = all.dump(1);
        if (!json_path.empty()) std::ofstream(json_path) << text << "\n";
        if (!cpp_path.empty()) {
            std::ofstream cpp(cpp_path);
            cpp << "// Generated by tessera-strategyc from the Halide descriptions. Do not edit.\n"
                << "namespace tessera::lang::gen {\nextern const char kStrategyTableJson[];\n"
                << "const char kStrategyTableJson[] = R\"tesseraJSON(" << text << ")tesseraJSON\";\n}\n";
        }
        return 0;
    } catch (const std::exception &e) {
        std::cerr << "tessera-strategyc: " << e.what() << "\n";
        return 1;
    }
}
