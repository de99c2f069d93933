#include "tessera/checkpoint/state_dict.h"

#include <cstring>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/models/zoo.h"

namespace tessera {

namespace {

std::string stem(const std::string &name, const std::string &suffix) {
    return name.substr(0, name.size() - suffix.size());
}

// The operator that reads parameter t first (its layer).
OpKind reader_of(const Graph &g, TensorId t) {
    for (const Node &n : g.nodes())
        for (TensorId in : n.inputs)
            if (in == t) return n.call.kind;
    return OpKind::Reshape;
}

StTensor transposed(StTensor t) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<std::byte> out(t.data.size());
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            std::memcpy(out.data() + (c * rows + r) * 4, t.data.data() + (r * cols + c) * 4, 4);
    t.data = std::move(out);
    t.shape = {cols, rows};
    return t;
}

// A running statistic from the checkpoint, or its initial value from an
// older checkpoint that did not track it.
StTensor running_statistic(const Model &m, const StFile &f, const std::string &name) {
    const TensorInfo &ti = m.graph.tensor(m.graph.tensor_named(name));
    if (f.has(name)) return f.get(name, ti.type.dtype, ti.type.shape);
    auto v = m.values.find(name);
    if (v != m.values.end()) return StTensor::f32(name, ti.type.shape, v->second.f32);
    std::vector<float> init(static_cast<size_t>(ti.type.elements()));  // zeros or ones: no seed matters
    fill_init(ti.init, 0, name, ti.type.shape, init.data(), ti.type.elements());
    return StTensor::f32(name, ti.type.shape, init);
}

// Batch norm P's buffers in nn.Sequential(Conv2d, BatchNorm2d) form.
void add_batch_norm_buffers(std::vector<StTensor> &out, const Model &m, const StFile &f, const std::string &layer,
                            int64_t step) {
    for (const char *stat : {"running_mean", "running_var"}) {
        StTensor t = running_statistic(m, f, layer + "." + stat);
        t.name = layer + ".1." + stat;
        out.push_back(std::move(t));
    }
    out.push_back(StTensor::i64_scalar(layer + ".1.num_batches_tracked", step));
}

// One zoo parameter under its PyTorch name and layout (the rules in state_dict.h).
void map_zoo_param(const Model &built, const StFile &f, const std::string &model, const StTensor &t,
                   int64_t step, std::vector<StTensor> &out) {
    const Graph &g = built.graph;
    const std::string &name = t.name;
    const bool conv_with_bn = name.ends_with(".w") && g.find_tensor(stem(name, ".w") + ".gamma") &&
                              reader_of(g, g.tensor_named(stem(name, ".w") + ".gamma")) == OpKind::BatchNorm;
    const bool batch_norm = (name.ends_with(".gamma") || name.ends_with(".beta")) &&
                            reader_of(g, g.tensor_named(name)) == OpKind::BatchNorm;
    StTensor m = t;
    if (name.ends_with(".w") && t.shape.size() == 2) {
        m = transposed(t);
        m.name = stem(name, ".w") + ".weight";
    } else if (name.ends_with(".w") && t.shape.size() == 4) {
        m.name = stem(name, ".w") + (conv_with_bn ? ".0.weight" : ".weight");
    } else if (name.ends_with(".b")) {
        m.name = stem(name, ".b") + ".bias";
    } else if (name.ends_with(".gamma")) {
        m.name = stem(name, ".gamma") + (batch_norm ? ".1.weight" : ".weight");
        if (batch_norm) add_batch_norm_buffers(out, built, f, stem(name, ".gamma"), step);
    } else if (name.ends_with(".beta")) {
        m.name = stem(name, ".beta") + (batch_norm ? ".1.bias" : ".bias");
    } else if (t.shape.size() == 2 && reader_of(g, g.tensor_named(name)) == OpKind::Embedding) {
        m.name = name + ".weight";
    } else {
        fail("--export-state-dict: model '", model, "' has parameter '", name, "' ", shape_str(t.shape),
             ", which no PyTorch module's layout is defined for (docs/training.md#weights-for-pytorch)");
    }
    out.push_back(std::move(m));
}

}  // namespace

void export_state_dict(const std::string &model, const std::string &checkpoint_dir, const std::string &out,
                       DType dtype) {
    TESSERA_CHECK(!checkpoint_dir.empty(), "--export-state-dict needs --checkpoint DIR, the checkpoint to export");
    const StFile f = read_safetensors(checkpoint_path(checkpoint_dir));
    const Model m = build_model(model, 1);
    auto step_it = f.metadata.find("step");
    const int64_t step = step_it == f.metadata.end() ? 0 : std::stoll(step_it->second);
    std::vector<StTensor> tensors;
    for (TensorId t : m.graph.with_role(TensorRole::Param)) {
        const TensorInfo &ti = m.graph.tensor(t);
        TESSERA_CHECK(f.has(ti.name), checkpoint_path(checkpoint_dir), " has no tensor '", ti.name, "' of model '",
                      model, "'; was it written for another model?");
        const StTensor &st = f.get(ti.name, ti.type.dtype, ti.type.shape);
        if (m.imported) tensors.push_back(st);
        else map_zoo_param(m, f, model, st, step, tensors);
    }
    if (m.imported) {
        for (TensorId t : running_statistics(m.graph)) tensors.push_back(running_statistic(m, f, m.graph.tensor(t).name));
        for (StTensor &c : step_counters(m.graph, step)) tensors.push_back(std::move(c));
    }
    if (dtype != DType::F32)
        for (StTensor &t : tensors) t = narrowed(std::move(t), dtype);
    write_safetensors(out, tensors, {{"format", "pt"}, {"step", std::to_string(step)}, {"model", model}});
}

}  // namespace tessera
