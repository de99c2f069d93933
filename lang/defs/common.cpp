#include "defs.h"

#include "tessera/error.h"

namespace tessera::lang::defs {

using namespace Halide;

int Ctx::structural(const std::string &name) const {
    auto it = structural_.find(name);
    TESSERA_INTERNAL_ASSERT(it != structural_.end(), "description asked for structural attribute '",
                            name, "' that its variant does not set");
    return it->second;
}

std::vector<Var> dim_vars(int rank, const std::string &prefix) {
    std::vector<Var> v;
    for (int k = 0; k < rank; k++) v.emplace_back(prefix + std::to_string(rank - 1 - k));
    return v;
}

RDom reduction(const std::vector<std::pair<std::string, Expr>> &dims) {
    Region region;
    std::string name;
    for (const auto &[n, extent] : dims) {
        region.emplace_back(0, extent);
        name += (name.empty() ? "" : "__") + n;
    }
    return RDom(region, name);
}

std::string rvar_dim_name(const std::string &rvar) {
    size_t dollar = rvar.rfind('$');
    std::string base = rvar.substr(0, rvar.find('$')), comp = dollar == std::string::npos ? "x" : rvar.substr(dollar + 1);
    int index = comp == "x" ? 0 : comp == "y" ? 1 : comp == "z" ? 2 : comp == "w" ? 3 : std::stoi(comp);
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        size_t sep = base.find("__", start);
        parts.push_back(base.substr(start, sep - start));
        if (sep == std::string::npos) break;
        start = sep + 2;
    }
    return index < static_cast<int>(parts.size()) ? parts[index] : base + "#" + comp;
}

std::vector<Expr> extents_of(Ctx &c, int input, int rank) {
    std::vector<Expr> ext;
    for (int k = 0; k < rank; k++) ext.push_back(c.extent(input, k));
    return ext;
}

OpDef shaped_like_input(Ctx &c, Func y, int rank) {
    OpDef d;
    d.outputs = {y};
    d.output_extents = {extents_of(c, 0, rank)};
    return d;
}

void schedule_rows(Func out, const std::vector<Func> &per_row, const std::vector<Func> &per_elem,
                   const Target &t) {
    const int L = t.natural_vector_size<float>();
    Var inner = out.args()[0], row = out.args()[1], ro("ro"), ri("ri");
    out.split(row, ro, ri, 4, TailStrategy::GuardWithIf).parallel(ro).vectorize(inner, L, TailStrategy::GuardWithIf);
    for (Func f : per_elem) f.compute_at(out, ri).vectorize(f.args()[0], L, TailStrategy::GuardWithIf);
    for (Func f : per_row) f.compute_at(out, ri);
}

std::vector<Expr> as_exprs(const std::vector<Var> &v) { return {v.begin(), v.end()}; }

void schedule_elementwise(Func f, const Target &t) {
    std::vector<Var> args = f.args();
    int lanes = t.natural_vector_size<float>();
    if (args.size() == 1) {
        Var xo("xo"), xi("xi");
        f.split(args[0], xo, xi, lanes * 1024, TailStrategy::GuardWithIf)
            .vectorize(xi, lanes, TailStrategy::GuardWithIf)
            .parallel(xo);
        return;
    }
    f.vectorize(args[0], lanes, TailStrategy::GuardWithIf).parallel(args.back());
}

const std::vector<Description> &descriptions() {
    static const std::vector<Description> all = [] {
        std::vector<Description> d;
        register_matmul(d);
        register_elementwise(d);
        register_softmax(d);
        register_norm(d);
        register_conv(d);
        register_layout(d);
        register_misc(d);
        register_optim(d);
        return d;
    }();
    return all;
}

}  // namespace tessera::lang::defs
