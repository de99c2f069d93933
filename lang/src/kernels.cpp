#include "tessera/lang/kernels.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kernel_table.h"
#include "tessera/lang/staged.h"

namespace tessera {

namespace {

// Halide reports kernel failures through halide_error(); keep the last message of
// this thread so that the exception can carry it.
thread_local std::string last_halide_error;

void capture_halide_error(void *, const char *msg) { last_halide_error = msg ? msg : ""; }

const std::unordered_map<std::string, const lang::gen::KernelEntry *> &kernel_index() {
    static const auto index = [] {
        halide_set_error_handler(capture_halide_error);
        std::unordered_map<std::string, const lang::gen::KernelEntry *> m;
        for (const auto *family :
             {&lang::gen::kernels_matmul(), &lang::gen::kernels_elementwise(),
              &lang::gen::kernels_softmax(), &lang::gen::kernels_norm(), &lang::gen::kernels_conv(),
              &lang::gen::kernels_layout(), &lang::gen::kernels_misc(), &lang::gen::kernels_optim()})
            for (const auto &e : *family) m[e.name] = &e;
        return m;
    }();
    return index;
}

halide_type_t halide_type_of(DType t) {
    switch (t) {
    case DType::F32: return halide_type_t(halide_type_float, 32);
    case DType::I32: return halide_type_t(halide_type_int, 32);
    case DType::F64: return halide_type_t(halide_type_float, 64);
    case DType::BF16: return halide_type_t(halide_type_bfloat, 16);
    case DType::F16: return halide_type_t(halide_type_float, 16);
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown dtype");
}

// A halide_buffer_t describing a dense row-major tensor, dimensions reversed into
// Halide's innermost-first order.
struct HalideView {
    halide_buffer_t buf{};
    halide_dimension_t dims[8]{};

    explicit HalideView(const lang::KernelArg &a) {
        const Shape &shape = a.view.empty() ? a.t.type.shape : a.view;
        TESSERA_INTERNAL_ASSERT(shape.size() <= 8, "rank ", shape.size(), " view");
        TESSERA_INTERNAL_ASSERT(num_elements(shape) == a.t.type.elements(), "view ", shape_str(shape),
                                " of ", type_str(a.t.type));
        int rank = static_cast<int>(shape.size());
        int64_t stride = 1;
        for (int k = 0; k < rank; k++) {
            int64_t extent = shape[rank - 1 - k];
            dims[k].min = 0;
            dims[k].extent = static_cast<int32_t>(extent);
            dims[k].stride = static_cast<int32_t>(stride);
            stride *= extent;
        }
        buf.host = static_cast<uint8_t *>(a.t.data);
        buf.dimensions = rank;
        buf.dim = dims;
        buf.type = halide_type_of(a.t.type.dtype);
    }
};

// A staged call in progress on this thread (run_staged): the family's dispatch
// builds the plain kernel's arguments, and call_kernel turns them into the
// phase's kernel by appending the stage inputs, swapping in the stage output
// and adding the block's whole extents and origin as scalars.
struct StagedRun {
    std::string suffix;                 // "__s<p>" or "__fin"
    std::vector<Shape> whole, origin;   // per operator input
    std::vector<TensorRef> stage_in;
    std::vector<TensorRef> stage_out;   // empty in the final phase
};
thread_local const StagedRun *staged_run = nullptr;

// The outputs of the call in progress on this thread (run_op) that its 16-bit
// inputs' storage form would round but the call keeps in f32 (kF32OutputsAttr).
thread_local const std::vector<int64_t> *kept_f32_outputs = nullptr;

// `shape` as the kernel sees a tensor whose own shape is `own` and whose kernel
// view is `view`: views fold leading dimensions into the first.
Shape as_viewed(const Shape &shape, const Shape &own, const Shape &view, bool origin) {
    if (view.empty() || view == own) return shape;
    const size_t keep = view.size() - 1, lead = own.size() - keep;
    Shape v = {origin ? 0 : lang::extent_product(shape, 0, static_cast<int>(lead))};
    v.insert(v.end(), shape.begin() + static_cast<std::ptrdiff_t>(lead), shape.end());
    return v;
}

void add_staged_args(const StagedRun &run, std::vector<lang::KernelArg> &in, lang::Scalars &s,
                     std::vector<lang::KernelArg> &out) {
    TESSERA_INTERNAL_ASSERT(in.size() == run.whole.size(), "staged kernel: ", in.size(), " arguments for ",
                            run.whole.size(), " inputs");
    for (size_t i = 0; i < in.size(); i++) {
        const Shape &own = in[i].t.type.shape;
        Shape whole = as_viewed(run.whole[i], own, in[i].view, false);
        Shape origin = as_viewed(run.origin[i], own, in[i].view, true);
        for (size_t d = 0; d < whole.size(); d++) {
            std::string at = std::to_string(i) + "_" + std::to_string(d);
            s.set("whole_in" + at, static_cast<double>(whole[d]));
            s.set("origin_in" + at, static_cast<double>(origin[d]));
        }
    }
    for (const TensorRef &t : run.stage_in) in.push_back({t, {}});
    if (!run.stage_out.empty()) {
        out.clear();
        for (const TensorRef &t : run.stage_out) out.push_back({t, {}});
    }
}

// Runs one phase of a staged operator (staged.h) through its family's dispatch.
void run_staged(const OpCall &call, const std::vector<TensorRef> &inputs, const std::vector<TensorRef> &outputs) {
    const OpCall plain = unstaged_call(call);
    const int phase = staged_phase(call);
    std::vector<TensorRef> own(inputs.begin(), inputs.end() - phase);
    std::vector<TensorType> own_types;
    for (const TensorRef &t : own) own_types.push_back(t.type);
    const int m = static_cast<int>(op_stages(plain, own_types).size());
    StagedRun run;
    run.suffix = phase < m ? "__s" + std::to_string(phase) : std::string("__fin");
    for (size_t i = 0; i < own.size(); i++) {
        run.whole.push_back(staged_whole(call, i));
        run.origin.push_back(staged_origin(call, i));
    }
    run.stage_in.assign(inputs.end() - phase, inputs.end());
    std::vector<TensorRef> plain_out = outputs;
    if (phase < m) {
        // The family dispatch shapes the operator's own outputs; the phase
        // writes its stage instead.
        run.stage_out = outputs;
        plain_out.clear();
        for (const TensorType &t : infer_types(plain, own_types)) plain_out.push_back({nullptr, t});
    }
    staged_run = &run;
    struct Reset {
        ~Reset() { staged_run = nullptr; }
    } reset;
    lang::family_of(plain.kind).run(plain, own, plain_out);
}

}  // namespace

namespace lang {

namespace {

// The buffers a storage form writes besides the call's own outputs.
struct NarrowingScratch {
    std::vector<std::vector<float>> wide;         // each rounded output's f32 result
    std::vector<std::vector<uint16_t>> narrowed;  // each kept output's rounded copy, unread
};

// A storage form computes each 16-bit output in f32 into a scratch output of
// its own before narrowing it (tessera-kernelc's stored_outputs): one f32
// buffer per 16-bit output, in order, after the outputs. An output the call
// keeps in f32 (kept_f32_outputs) swaps places: the call's f32 buffer takes
// the scratch's place and the rounded copy goes to a buffer nobody reads.
void add_narrowing_scratch(std::vector<KernelArg> &out, DType store, NarrowingScratch &scratch) {
    const size_t outputs = out.size();
    const bool whole_outputs = !staged_run || staged_run->stage_out.empty();
    for (size_t k = 0; k < outputs; k++) {
        const TensorType t = out[k].t.type;  // a copy: push_back moves the vector
        const bool kept = whole_outputs && kept_f32_outputs &&
                          std::find(kept_f32_outputs->begin(), kept_f32_outputs->end(), static_cast<int64_t>(k)) !=
                              kept_f32_outputs->end();
        if (kept) {
            scratch.narrowed.emplace_back(static_cast<size_t>(t.elements()));
            out.push_back(out[k]);
            out[k].t = {scratch.narrowed.back().data(), TensorType{store, t.shape}};
        } else if (is_half(t.dtype)) {
            scratch.wide.emplace_back(static_cast<size_t>(t.elements()));
            out.push_back({{scratch.wide.back().data(), TensorType{DType::F32, t.shape}}, out[k].view});
        }
    }
}

// The call's 16-bit storage type (kernelc's storage forms), or F32 when none.
DType storage_of(const std::vector<KernelArg> &in, const std::vector<KernelArg> &out) {
    for (const auto *args : {&in, &out})
        for (const KernelArg &a : *args)
            if (is_half(a.t.type.dtype)) return a.t.type.dtype;
    return DType::F32;
}

}  // namespace

double Scalars::get(const std::string &k) const {
    auto it = values.find(k);
    TESSERA_INTERNAL_ASSERT(it != values.end(), "kernel scalar '", k, "' was not supplied");
    return it->second;
}

void call_kernel(const std::string &plain_name, const std::vector<KernelArg> &plain_in, const Scalars &plain_s,
                 const std::vector<KernelArg> &plain_out, bool storage_form) {
    std::string name = plain_name;
    const DType store = storage_form ? storage_of(plain_in, plain_out) : DType::F32;
    if (store != DType::F32) name += std::string("__") + dtype_name(store);
    std::vector<KernelArg> in = plain_in, out = plain_out;
    Scalars s = plain_s;
    if (staged_run) {
        name += staged_run->suffix;
        add_staged_args(*staged_run, in, s, out);
    }
    const auto &index = kernel_index();
    auto it = index.find(name);
    TESSERA_INTERNAL_ASSERT(it != index.end(), "no kernel named '", name, "'");
    const gen::KernelEntry &k = *it->second;
    NarrowingScratch scratch;
    if (store != DType::F32) add_narrowing_scratch(out, store, scratch);
    TESSERA_INTERNAL_ASSERT(static_cast<int>(in.size()) == k.num_inputs &&
                                static_cast<int>(out.size()) == k.num_outputs,
                            name, " takes ", k.num_inputs, " inputs and ", k.num_outputs, " outputs");
    std::vector<HalideView> views;
    views.reserve(in.size() + out.size());
    std::vector<halide_buffer_t *> ib, ob;
    for (const auto &a : in) ib.push_back(&views.emplace_back(a).buf);
    for (const auto &a : out) ob.push_back(&views.emplace_back(a).buf);
    last_halide_error.clear();
    int rc = k.call(gen::chosen_kernel_target(), ib.data(), s, ob.data());
    TESSERA_INTERNAL_ASSERT(rc == 0, "kernel ", name, " failed with code ", rc, ": ", last_halide_error);
}

}  // namespace lang

void check_output_types(const OpCall &call, const std::vector<TensorRef> &inputs,
                        const std::vector<TensorRef> &outputs) {
    std::vector<TensorType> in_types;
    for (const auto &t : inputs) in_types.push_back(t.type);
    std::vector<TensorType> expect = infer_types(call, in_types);
    TESSERA_CHECK(outputs.size() == expect.size(), call.who(), ": expects ", expect.size(),
                  " output tensors, got ", outputs.size());
    for (size_t i = 0; i < expect.size(); i++)
        TESSERA_CHECK(outputs[i].type == expect[i], call.who(), ": output ", i, " must be ",
                      type_str(expect[i]), ", got ", type_str(outputs[i].type));
}

void check_kernel_storage(const OpCall &call, const std::vector<TensorRef> &inputs,
                          const std::vector<TensorRef> &outputs, const char *device,
                          const std::vector<DType> &forms) {
    if (!forms.empty() && call.kind == OpKind::Cast) return;
    std::string held = "f32";
    for (DType t : forms) held += std::string(" and ") + dtype_name(t);
    auto check = [&](const std::vector<TensorRef> &ts, const char *what) {
        for (size_t i = 0; i < ts.size(); i++) {
            const DType t = ts[i].type.dtype;
            const bool has_form = std::find(forms.begin(), forms.end(), t) != forms.end();
            TESSERA_CHECK(!is_half(t) || has_form, call.who(), ": ", what, " ", i, " is ", type_str(ts[i].type),
                          ", and the ", device, " kernels read and write ", held,
                          " only; docs/limitations.md, Mixed precision");
        }
    };
    check(inputs, "input");
    check(outputs, "output");
}

void run_op(const OpCall &call, const std::vector<TensorRef> &inputs,
            const std::vector<TensorRef> &outputs) {
    check_output_types(call, inputs, outputs);
    check_kernel_storage(call, inputs, outputs, "CPU", {DType::BF16, DType::F16});
    const std::vector<int64_t> kept = call.attrs.get_ints(call.who(), kF32OutputsAttr, {});
    kept_f32_outputs = &kept;
    struct Reset {
        ~Reset() { kept_f32_outputs = nullptr; }
    } reset;
    if (is_staged(call)) run_staged(call, inputs, outputs);
    else lang::family_of(call.kind).run(call, inputs, outputs);
}

std::vector<std::string> kernel_names() {
    std::vector<std::string> names;
    for (const auto &[n, e] : kernel_index()) names.push_back(n);
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace tessera
