// tessera-kernelc: compiles the CPU kernels of one operator family ahead of time.
//
// For every kernel variant of every description in the family, it builds the
// description with ImageParams for inputs and Params for scalar attributes, applies
// the description's schedule, and links the family into one object file and one
// header. It also writes kernels_<family>_table.cpp, the adaptors through which the
// runtime calls each kernel by name with named scalars.
//
// Argument order of every kernel: inputs by index, scalar Params sorted by name,
// then outputs.
//
// Staged kernels. A description whose reductions may cross devices marks each
// of them with Ctx::stage() (batch norm's sum_x and sum_sq_dev, softmax's
// row_max and row_sum). For such an operator with stages s_0 .. s_{m-1}, every
// variant also gets m + 1 kernels that run it one step at a time on a block of
// its inputs: "<name>__s<p>" computes s_p (partial over the block), given the
// reduced s_0 .. s_{p-1} as extra inputs after the operator's own; "<name>__fin"
// computes the outputs given every stage. Between the steps the executor
// combines each partial stage across the devices that split its reduction.
// Staged kernels take the whole tensor's extents ("whole_in<i>_<d>") for the
// counts a mean divides by, and the block's origin ("origin_in<i>_<d>") for
// indices compared with data.
//
// Usage: tessera-kernelc --family F --target T --out-dir D
//        tessera-kernelc --runtime --target T --out-dir D
#include <fstream>
#include <iostream>

#include "../defs/defs.h"

using namespace Halide;
using namespace tessera::lang::defs;

namespace {

class KernelCtx : public Ctx {
public:
    // `provided` < 0: the plain kernel. Otherwise a staged kernel: the first
    // `provided` stages are read from extra inputs.
    KernelCtx(StructMap s, Target t, int provided = -1)
        : Ctx(std::move(s)), target_(std::move(t)), provided_(provided) {}

    Func input(int i, Type t, int rank, Boundary b) override {
        auto it = inputs_.find(i);
        if (it == inputs_.end()) it = inputs_.emplace(i, ImageParam(t, rank, "in" + std::to_string(i))).first;
        ImageParam &p = it->second;
        if (b == Boundary::Zero) return BoundaryConditions::constant_exterior(p, cast(t, 0));
        if (b == Boundary::Lowest) return BoundaryConditions::constant_exterior(p, t.min());
        if (b == Boundary::Clamp) return BoundaryConditions::repeat_edge(p);
        Func f("in" + std::to_string(i) + "_view");
        std::vector<Var> v = dim_vars(rank, "i");
        f(v) = p(as_exprs(v));
        return f;
    }
    Expr extent(int i, int d) override {
        auto it = inputs_.find(i);
        if (it == inputs_.end()) throw std::runtime_error("extent() of input " + std::to_string(i) + " before input()");
        int rank = it->second.dimensions();
        return it->second.dim(rank - 1 - d).extent();
    }
    Expr param_int(const std::string &name) override {
        auto it = ints_.find(name);
        if (it == ints_.end()) it = ints_.emplace(name, Param<int32_t>(name)).first;
        return it->second;
    }
    Expr param_float(const std::string &name) override {
        auto it = floats_.find(name);
        if (it == floats_.end()) it = floats_.emplace(name, Param<float>(name)).first;
        return it->second;
    }
    // The descriptions' schedules assume the whole operator in one kernel;
    // staged kernels keep Halide's default schedule.
    bool scheduling() const override { return provided_ < 0; }
    const Target &target() const override { return target_; }

    Func stage(Func f) override {
        const int p = static_cast<int>(stages_.size());
        stages_.push_back(f);
        if (p >= provided_) return f;
        ImageParam in(f.output_types()[0], f.dimensions(), "stage" + std::to_string(p));
        stage_inputs_.push_back(in);
        Func view(f.name() + "_reduced");
        view(f.args()) = in(f.args());
        return view;
    }
    Expr whole_extent(int i, int d) override {
        if (provided_ < 0) return extent(i, d);
        return param_int("whole_in" + std::to_string(i) + "_" + std::to_string(d));
    }
    Expr origin(int i, int d) override {
        if (provided_ < 0) return 0;
        return param_int("origin_in" + std::to_string(i) + "_" + std::to_string(d));
    }
    // The stages in the order the description marked them.
    const std::vector<Func> &stages() const { return stages_; }

    // Arguments in the documented order, and the adaptor's argument list.
    std::vector<Argument> arguments(std::vector<std::string> &call_args) const {
        std::vector<Argument> args;
        for (const auto &[i, p] : inputs_) {
            args.push_back(p);
            call_args.push_back("in[" + std::to_string(i) + "]");
        }
        for (size_t j = 0; j < stage_inputs_.size(); j++) {
            args.push_back(stage_inputs_[j]);
            call_args.push_back("in[" + std::to_string(inputs_.size() + j) + "]");
        }
        std::map<std::string, std::pair<Argument, std::string>> scalars;
        for (const auto &[n, p] : ints_) scalars.emplace(n, std::make_pair(Argument(p), "static_cast<int32_t>(s.get(\"" + n + "\"))"));
        for (const auto &[n, p] : floats_) scalars.emplace(n, std::make_pair(Argument(p), "static_cast<float>(s.get(\"" + n + "\"))"));
        for (const auto &[n, a] : scalars) {
            args.push_back(a.first);
            call_args.push_back(a.second);
        }
        return args;
    }
    int num_inputs() const { return static_cast<int>(inputs_.size() + stage_inputs_.size()); }

private:
    Target target_;
    int provided_ = -1;
    std::vector<Func> stages_;
    std::vector<ImageParam> stage_inputs_;
    std::map<int, ImageParam> inputs_;
    std::map<std::string, Param<int32_t>> ints_;
    std::map<std::string, Param<float>> floats_;
};

Target parse_target(const std::string &s) {
    return s == "host" ? get_host_target() : Target(s);
}

// Fails the build when a staged kernel still computes a stage it was given:
// the description used a stage's Func after stage() instead of its result.
void check_uses_provided(const std::vector<Func> &outputs, const KernelCtx &ctx, int provided,
                         const std::string &fn) {
    for (const Func &o : outputs) {
        std::map<std::string, Internal::Function> calls = Internal::find_transitive_calls(o.function());
        for (int p = 0; p < provided; p++)
            if (calls.count(ctx.stages()[p].name()))
                throw std::runtime_error(fn + " computes stage '" + ctx.stages()[p].name() +
                                         "' although it is given; use the Func that Ctx::stage() returned");
    }
}

// Collects the modules of one family and the adaptors and table that call them.
struct FamilyOut {
    std::vector<Module> modules;
    std::ostringstream table, adaptors;

    void add(const std::string &fn, KernelCtx &ctx, const std::vector<Func> &outputs, const Target &target) {
        std::vector<std::string> call_args;
        std::vector<Argument> args = ctx.arguments(call_args);
        for (size_t k = 0; k < outputs.size(); k++) call_args.push_back("out[" + std::to_string(k) + "]");
        Pipeline p(outputs);
        std::cerr << "  kernel " << fn << "\n";
        modules.push_back(p.compile_to_module(args, fn, target));
        adaptors << "int call_" << fn << "(halide_buffer_t **in, const Scalars &s, halide_buffer_t **out) {\n"
                 << "    return " << fn << "(";
        for (size_t k = 0; k < call_args.size(); k++) adaptors << (k ? ", " : "") << call_args[k];
        adaptors << ");\n}\n\n";
        table << "        {\"" << fn << "\", &call_" << fn << ", " << ctx.num_inputs() << ", " << outputs.size()
              << "},\n";
    }
};

// The plain kernel of a variant and, when its description marks stages, the
// staged kernels (see the top of this file).
void compile_variant(const Description &d, const KernelVariant &kv, const Target &target, FamilyOut &out) {
    std::string fn = std::string("tk_") + tessera::op_name(d.op) + (kv.suffix.empty() ? "" : "_" + kv.suffix);
    KernelCtx ctx(kv.structural, target);
    OpDef def = d.define(ctx);
    out.add(fn, ctx, def.outputs, target);
    const int m = static_cast<int>(ctx.stages().size());
    if (m == 0) return;
    for (int p = 0; p <= m; p++) {
        KernelCtx staged(kv.structural, target, p);
        OpDef sd = d.define(staged);
        std::vector<Func> outputs = p < m ? std::vector<Func>{staged.stages()[p]} : sd.outputs;
        std::string name = fn + (p < m ? "__s" + std::to_string(p) : std::string("__fin"));
        check_uses_provided(outputs, staged, p, name);
        out.add(name, staged, outputs, target);
    }
}

int compile_family(const std::string &family, const Target &base, const std::string &dir) {
    Target target = base.with_feature(Target::NoRuntime);
    FamilyOut out;
    for (const Description &d : descriptions()) {
        if (tessera::op_info(d.op).family != family) continue;
        for (const KernelVariant &kv : d.kernels) compile_variant(d, kv, target, out);
    }
    std::vector<Module> &modules = out.modules;
    std::ostringstream &table = out.table, &adaptors = out.adaptors;
    std::string base_name = dir + "/kernels_" + family;
    if (modules.empty()) {
        // A family with no kernels yet still produces a valid (empty) object.
        std::ofstream(base_name + ".h") << "#pragma once\n";
        Func dummy("tk_empty_" + family);
        Var x;
        dummy(x) = 0;
        modules.push_back(dummy.compile_to_module({}, "tk_empty_" + family, target));
    }
    Module linked = link_modules("kernels_" + family, modules);
    linked.compile({{OutputFileType::object, base_name + ".o"}, {OutputFileType::c_header, base_name + ".h"}});
    std::ofstream cpp(base_name + "_table.cpp");
    cpp << "// Generated by tessera-kernelc. Do not edit.\n"
        << "#include \"kernel_table.h\"\n#include \"kernels_" << family << ".h\"\n\n"
        << "namespace tessera::lang::gen {\n\nnamespace {\n\n" << adaptors.str() << "}  // namespace\n\n"
        << "const std::vector<KernelEntry> &kernels_" << family << "() {\n"
        << "    static const std::vector<KernelEntry> table = {\n" << table.str() << "    };\n"
        << "    return table;\n}\n\n}  // namespace tessera::lang::gen\n";
    return cpp ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    std::string family, target = "host", dir = ".";
    bool runtime = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--family" && i + 1 < argc) family = argv[++i];
        else if (a == "--target" && i + 1 < argc) target = argv[++i];
        else if (a == "--out-dir" && i + 1 < argc) dir = argv[++i];
        else if (a == "--runtime") runtime = true;
        else {
            std::cerr << "tessera-kernelc: unknown argument '" << a << "'\n";
            return 2;
        }
    }
    try {
        if (runtime) {
            compile_standalone_runtime(dir + "/halide_runtime.o", parse_target(target));
            return 0;
        }
        if (family.empty()) {
            std::cerr << "tessera-kernelc: --family or --runtime is required\n";
            return 2;
        }
        return compile_family(family, parse_target(target), dir);
    } catch (const std::exception &e) {
        std::cerr << "tessera-kernelc: " << e.what() << "\n";
        return 1;
    }
}
