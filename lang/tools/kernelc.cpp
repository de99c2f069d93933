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
// Several targets. --target takes a comma-separated list, fastest first and a
// portable baseline last (TESSERA_HALIDE_TARGET; "host" is this machine's CPU).
// Every kernel is compiled once per target, as "<name>__t<i>" in
// kernels_<family>_t<i>.o, and its adaptor calls the one the runtime chose: the
// first target whose features halide_can_use_target_features() finds on the
// CPU (lang/src/cpu_runtime.cpp). This is Halide's multi-target scheme
// (compile_multitarget) with the choice made once per process for every kernel
// rather than cached per function by a wrapper, so that all kernels run the same
// target and a test can choose again. A target identical to an earlier one is
// not compiled again; its adaptor entry calls the earlier one. The runtime is
// compiled once, for the features all the targets share (as
// compile_multitarget does), so that it runs wherever the baseline runs.
//
// Usage: tessera-kernelc --family F --target T[,T...] --part I --out-dir D
//            (kernels_F_tI.o and kernels_F_tI.h: the family for target I)
//        tessera-kernelc --family F --target T[,T...] --table --out-dir D
//            (kernels_F_table.cpp and kernels_F.h: the adaptors and the header)
//        tessera-kernelc --runtime --target T[,T...] --out-dir D
//            (halide_runtime.o and kernel_targets.cpp: the targets' names and features)
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "../defs/defs.h"

using namespace Halide;
using namespace tessera::lang::defs;

namespace {

class KernelCtx : public Ctx {
public:
    // `provided` < 0: the plain kernel. Otherwise a staged kernel: the first
    // `provided` stages are read from extra inputs.
    // `storage`: the type the kernel's f32 inputs and outputs are held in
    // (Float(32), or BFloat(16) or Float(16) for a storage form; see compile_variant).
    KernelCtx(StructMap s, Target t, int provided = -1, tessera::OpKind op = tessera::OpKind::Matmul,
              Type storage = Float(32))
        : Ctx(std::move(s)), target_(std::move(t)), provided_(provided), op_(op), storage_(storage) {}

    // A storage form's f32 inputs are read from the storage type and widened,
    // before any boundary condition, so that padding is the f32 kernel's.
    Func input(int i, Type t, int rank, Boundary b) override {
        const bool stored = t == Float(32) && storage_ != Float(32) && !tessera::input_stays_f32(op_, i);
        auto it = inputs_.find(i);
        if (it == inputs_.end())
            it = inputs_.emplace(i, ImageParam(stored ? storage_ : t, rank, "in" + std::to_string(i))).first;
        ImageParam &p = it->second;
        Func f("in" + std::to_string(i) + "_view");
        std::vector<Var> v = dim_vars(rank, "i");
        f(v) = stored ? cast(t, p(as_exprs(v))) : p(as_exprs(v));
        if (!stored) {
            if (b == Boundary::Zero) return BoundaryConditions::constant_exterior(p, cast(t, 0));
            if (b == Boundary::Lowest) return BoundaryConditions::constant_exterior(p, t.min());
            if (b == Boundary::Clamp) return BoundaryConditions::repeat_edge(p);
            return f;
        }
        Region bounds;
        for (int d = 0; d < rank; d++) bounds.emplace_back(p.dim(d).min(), p.dim(d).extent());
        if (b == Boundary::Zero) return BoundaryConditions::constant_exterior(f, cast(t, 0), bounds);
        if (b == Boundary::Lowest) return BoundaryConditions::constant_exterior(f, t.min(), bounds);
        if (b == Boundary::Clamp) return BoundaryConditions::repeat_edge(f, bounds);
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
    tessera::OpKind op_;
    Type storage_;
    std::vector<Func> stages_;
    std::vector<ImageParam> stage_inputs_;
    std::map<int, ImageParam> inputs_;
    std::map<std::string, Param<int32_t>> ints_;
    std::map<std::string, Param<float>> floats_;
};

// Whether this CPU has AVX-512 FP16 (CPUID leaf 7, EDX bit 23).
bool cpu_has_avx512_fp16() {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 23) & 1u);
#else
    return false;
#endif
}

// Halide's host target, but for one error of Halide 14's: it takes any CPU
// with AVX-512 BF16 for a Sapphire Rapids, whose code also uses AVX-512 FP16
// (vmovw). AMD's Zen 4 and Zen 5 have BF16 and not FP16, and the bf16 kernels
// built for them as Sapphire Rapids die of SIGILL; on those the host target is
// the Cannon Lake one. Halide's run-time check (halide_can_use_target_features)
// still picks these kernels there: Halide detects the same CPU at run time.
Target host_target() {
    Target t = get_host_target();
    if (t.has_feature(Target::AVX512_SapphireRapids) && !cpu_has_avx512_fp16())
        t = t.without_feature(Target::AVX512_SapphireRapids);
    return t;
}

// TESSERA_HALIDE_TARGET resolved: the targets in the order they are tried, and
// for each the first one identical to it (itself when it is the first).
struct KernelTargets {
    std::vector<Target> list;
    std::vector<int> first_same;
};

KernelTargets parse_targets(const std::string &spec) {
    KernelTargets ts;
    std::stringstream in(spec);
    for (std::string s; std::getline(in, s, ',');) {
        if (s.empty()) throw std::runtime_error("--target '" + spec + "' has an empty target");
        Target t = s == "host" ? host_target() : Target(s);
        if (!ts.list.empty() && (t.os != ts.list[0].os || t.arch != ts.list[0].arch || t.bits != ts.list[0].bits))
            throw std::runtime_error("--target '" + spec + "': every target must have the same arch-bits-os, and " +
                                     t.to_string() + " differs from " + ts.list[0].to_string());
        int same = static_cast<int>(ts.list.size());
        for (int j = 0; j < same; j++)
            if (ts.list[j] == t) {
                same = j;
                break;
            }
        ts.first_same.push_back(same);
        ts.list.push_back(t);
    }
    if (ts.list.empty()) throw std::runtime_error("--target is empty");
    return ts;
}

// arch-bits-os and the features every target has: the runtime must run
// wherever any of the kernels' targets does.
Target shared_target(const std::vector<Target> &list) {
    Target shared(list[0].os, list[0].arch, list[0].bits);
    for (int f = 0; f < Target::FeatureEnd; f++) {
        auto feature = static_cast<Target::Feature>(f);
        if (feature == Target::NoRuntime) continue;
        if (std::all_of(list.begin(), list.end(), [&](const Target &t) { return t.has_feature(feature); }))
            shared.set_feature(feature);
    }
    return shared;
}

std::string part_suffix(int part) { return "__t" + std::to_string(part); }

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

// Collects one family's kernels: for one target, their modules (`part` >= 0);
// for the table (`part` < 0), the adaptors that call the chosen target's
// version of each and the table of them.
struct FamilyOut {
    const KernelTargets &targets;
    int part = -1;
    std::vector<Module> modules;
    std::ostringstream table, adaptors;

    void add(const std::string &fn, KernelCtx &ctx, const std::vector<Func> &outputs) {
        std::vector<std::string> call_args;
        std::vector<Argument> args = ctx.arguments(call_args);
        for (size_t k = 0; k < outputs.size(); k++) call_args.push_back("out[" + std::to_string(k) + "]");
        if (part >= 0) {
            std::cerr << "  kernel " << fn << "\n";
            Pipeline p(outputs);
            modules.push_back(p.compile_to_module(args, fn + part_suffix(part), ctx.target()));
            return;
        }
        adaptors << "int call_" << fn << "(int target, halide_buffer_t **in, const Scalars &s, "
                 << "halide_buffer_t **out) {\n    static constexpr decltype(&" << fn << part_suffix(0)
                 << ") by_target[] = {";
        for (size_t t = 0; t < targets.list.size(); t++)
            adaptors << (t ? ", " : "") << "&" << fn << part_suffix(targets.first_same[t]);
        adaptors << "};\n    return by_target[target](";
        for (size_t k = 0; k < call_args.size(); k++) adaptors << (k ? ", " : "") << call_args[k];
        adaptors << ");\n}\n\n";
        table << "        {\"" << fn << "\", &call_" << fn << ", " << ctx.num_inputs() << ", " << outputs.size()
              << "},\n";
    }
};

// A storage form's outputs: each f32 output the operator stores in the
// storage type is narrowed from the description's own output, which stays an
// output of the pipeline (an f32 scratch buffer the caller passes after the
// stored outputs, one per narrowed output, in order) so that its schedule,
// specialisations included, applies as written. Halide 14 fails on those
// specialisations once the Func is an inner stage computed at root.
std::vector<Func> stored_outputs(const Description &d, const KernelCtx &ctx, const std::vector<Func> &outputs,
                                 Type storage) {
    if (storage == Float(32)) return outputs;
    std::vector<Func> stored, scratch;
    for (size_t k = 0; k < outputs.size(); k++) {
        Func y = outputs[k];
        if (y.output_types()[0] != Float(32) || tessera::output_stays_f32(d.op, static_cast<int>(k))) {
            stored.push_back(y);
            continue;
        }
        Func narrow(y.name() + "_stored");
        narrow(y.args()) = cast(storage, y(y.args()));
        if (ctx.scheduling()) schedule_elementwise(narrow, ctx.target());
        stored.push_back(narrow);
        scratch.push_back(y);
    }
    stored.insert(stored.end(), scratch.begin(), scratch.end());
    return stored;
}

// The plain kernel of a variant and, when its description marks stages, the
// staged kernels (see the top of this file), in f32 or a storage form
// ("<name>__bf16", "<name>__f16": f32 inputs and outputs held in 16 bits,
// computed in f32).
void compile_form(const Description &d, const KernelVariant &kv, const Target &target, Type storage,
                  FamilyOut &out) {
    std::string fn = std::string("tk_") + tessera::op_name(d.op) + (kv.suffix.empty() ? "" : "_" + kv.suffix);
    if (storage != Float(32)) fn += storage == BFloat(16) ? "__bf16" : "__f16";
    KernelCtx ctx(kv.structural, target, -1, d.op, storage);
    OpDef def = d.define(ctx);
    out.add(fn, ctx, stored_outputs(d, ctx, def.outputs, storage));
    const int m = static_cast<int>(ctx.stages().size());
    if (m == 0) return;
    for (int p = 0; p <= m; p++) {
        KernelCtx staged(kv.structural, target, p, d.op, storage);
        OpDef sd = d.define(staged);
        std::vector<Func> outputs =
            p < m ? std::vector<Func>{staged.stages()[p]} : stored_outputs(d, staged, sd.outputs, storage);
        std::string name = fn + (p < m ? "__s" + std::to_string(p) : std::string("__fin"));
        check_uses_provided(outputs, staged, p, name);
        out.add(name, staged, outputs);
    }
}

// Every operator with storage forms gets a bf16 and an f16 one beside its f32 kernel.
void compile_variant(const Description &d, const KernelVariant &kv, const Target &target, FamilyOut &out) {
    compile_form(d, kv, target, Float(32), out);
    if (!tessera::has_storage_forms(d.op)) return;
    compile_form(d, kv, target, BFloat(16), out);
    compile_form(d, kv, target, Float(16), out);
}

void collect_family(const std::string &family, const Target &target, FamilyOut &out) {
    for (const Description &d : descriptions()) {
        if (tessera::op_info(d.op).family != family) continue;
        for (const KernelVariant &kv : d.kernels) compile_variant(d, kv, target, out);
    }
}

// kernels_<family>_t<part>.o and .h: the family compiled for one target. A
// target identical to an earlier one, or a family with no kernels yet, still
// produces a valid object (holding one unused function).
int compile_part(const std::string &family, const KernelTargets &targets, int part, const std::string &dir) {
    if (part < 0 || part >= static_cast<int>(targets.list.size()))
        throw std::runtime_error("--part " + std::to_string(part) + " is not one of the " +
                                 std::to_string(targets.list.size()) + " targets");
    Target target = targets.list[part].with_feature(Target::NoRuntime);
    FamilyOut out{targets, part};
    if (targets.first_same[part] == part) collect_family(family, target, out);
    std::string base_name = dir + "/kernels_" + family + "_t" + std::to_string(part);
    std::vector<Module> &modules = out.modules;
    if (modules.empty()) {
        std::string name = "tk_unused_" + family + part_suffix(part);
        Func dummy(name);
        Var x;
        dummy(x) = 0;
        modules.push_back(dummy.compile_to_module({}, name, target));
    }
    Module linked = link_modules("kernels_" + family + "_t" + std::to_string(part), modules);
    linked.compile({{OutputFileType::object, base_name + ".o"}, {OutputFileType::c_header, base_name + ".h"}});
    return 0;
}

// kernels_<family>_table.cpp and kernels_<family>.h: the adaptors, and the
// header that declares every target's kernels.
int write_table(const std::string &family, const KernelTargets &targets, const std::string &dir) {
    FamilyOut out{targets};
    collect_family(family, targets.list.back(), out);
    std::string base_name = dir + "/kernels_" + family;
    std::ofstream h(base_name + ".h");
    h << "// Generated by tessera-kernelc. Do not edit.\n#pragma once\n";
    if (!out.table.str().empty())
        for (size_t t = 0; t < targets.list.size(); t++)
            if (targets.first_same[t] == static_cast<int>(t)) h << "#include \"kernels_" << family << "_t" << t << ".h\"\n";
    std::ofstream cpp(base_name + "_table.cpp");
    cpp << "// Generated by tessera-kernelc. Do not edit.\n"
        << "#include \"kernel_table.h\"\n#include \"kernels_" << family << ".h\"\n\n"
        << "namespace tessera::lang::gen {\n\nnamespace {\n\n" << out.adaptors.str() << "}  // namespace\n\n"
        << "const std::vector<KernelEntry> &kernels_" << family << "() {\n"
        << "    static const std::vector<KernelEntry> table = {\n" << out.table.str() << "    };\n"
        << "    return table;\n}\n\n}  // namespace tessera::lang::gen\n";
    return h && cpp ? 0 : 1;
}

// halide_runtime.o, for the features every target shares, and
// kernel_targets.cpp: each target's name and its features as
// halide_can_use_target_features() takes them.
int compile_runtime(const KernelTargets &targets, const std::string &dir) {
    compile_standalone_runtime(dir + "/halide_runtime.o", shared_target(targets.list));
    constexpr int words = (Target::FeatureEnd + 63) / 64;
    std::ofstream cpp(dir + "/kernel_targets.cpp");
    cpp << "// Generated by tessera-kernelc. Do not edit.\n#include \"kernel_table.h\"\n\n"
        << "static_assert((halide_target_feature_end + 63) / 64 == " << words
        << ", \"tessera-kernelc and HalideRuntime.h disagree on the target features\");\n\n"
        << "namespace tessera::lang::gen {\n\nconst std::vector<KernelTarget> &kernel_targets() {\n"
        << "    static const std::vector<KernelTarget> targets = {\n";
    for (const Target &t : targets.list) {
        uint64_t bits[words] = {};
        for (int f = 0; f < Target::FeatureEnd; f++)
            if (t.has_feature(static_cast<Target::Feature>(f))) bits[f / 64] |= uint64_t(1) << (f % 64);
        cpp << "        {\"" << t.to_string() << "\", {";
        for (int w = 0; w < words; w++) cpp << (w ? ", " : "") << "0x" << std::hex << bits[w] << std::dec << "ull";
        cpp << "}},\n";
    }
    cpp << "    };\n    return targets;\n}\n\n}  // namespace tessera::lang::gen\n";
    return cpp ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    std::string family, target = "host", dir = ".";
    bool runtime = false, table = false;
    int part = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--family" && i + 1 < argc) family = argv[++i];
        else if (a == "--target" && i + 1 < argc) target = argv[++i];
        else if (a == "--out-dir" && i + 1 < argc) dir = argv[++i];
        else if (a == "--part" && i + 1 < argc) part = std::atoi(argv[++i]);
        else if (a == "--runtime") runtime = true;
        else if (a == "--table") table = true;
        else {
            std::cerr << "tessera-kernelc: unknown argument '" << a << "'\n";
            return 2;
        }
    }
    try {
        KernelTargets targets = parse_targets(target);
        if (runtime) return compile_runtime(targets, dir);
        if (family.empty()) {
            std::cerr << "tessera-kernelc: --family or --runtime is required\n";
            return 2;
        }
        return table ? write_table(family, targets, dir) : compile_part(family, targets, part, dir);
    } catch (const std::exception &e) {
        std::cerr << "tessera-kernelc: " << e.what() << "\n";
        return 1;
    }
}
