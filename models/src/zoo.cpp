// The zoo's registry: spec parsing, parameter validation, help text, and the
// pieces every model shares. Each model lives in its own file.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "tessera/error.h"
#include "tessera/models/onnx_import.h"
#include "zoo_internal.h"

namespace tessera {

namespace zoo {

namespace {

const std::vector<const ModelDef *> &registry() {
    static const std::vector<const ModelDef *> defs = {&mlp_def(), &cnn_def(), &wresnet_def(), &lstm_def(),
                                                       &transformer_def()};
    return defs;
}

std::string join_names(const std::vector<std::string> &names) {
    std::string out;
    for (size_t i = 0; i < names.size(); i++) out += (i ? ", " : "") + names[i];
    return out;
}

}  // namespace

int64_t Params::get(const std::string &key, int64_t fallback, int64_t min, int64_t max) const {
    const int64_t v = value(key, fallback, min, max);
    read_[key] = std::to_string(v);
    return v;
}

int64_t Params::value(const std::string &key, int64_t fallback, int64_t min, int64_t max) const {
    auto it = spec_.params.find(key);
    if (it == spec_.params.end()) return fallback;
    const std::string &text = it->second;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == text.data() + text.size() &&
                                                 (v < min || v > max)))
        fail("parameter ", key, " = ", text, " is out of range; it must be between ", min, " and ", max,
             " (default ", fallback, ")");
    if (ec != std::errc() || end != text.data() + text.size())
        fail("parameter ", key, " = '", text, "' is not an integer; expected a whole number between ", min,
             " and ", max, " (default ", fallback, ")");
    return v;
}

void finish(Model &m, Builder &b, Tensor input, Tensor labels, Tensor logits, int64_t label_elements,
            const std::string &what) {
    TESSERA_INTERNAL_ASSERT(logits.rank() == 2, "logits ", type_str(logits.type()));
    Tensor loss = b.softmax_xent(logits, labels);
    Graph &g = b.graph();
    g.set_output("loss", loss.id);
    g.set_output("logits", logits.id);
    m.input = input.id;
    m.labels = labels.id;
    m.logits = logits.id;
    m.loss = loss.id;
    m.num_classes = logits.dim(1);
    m.label_elements = label_elements;
    m.description = what + " (" + format_count(g.param_count()) + " parameters)";
}

Tensor concat_all(Builder &b, std::vector<Tensor> parts, int axis) {
    TESSERA_INTERNAL_ASSERT(!parts.empty(), "concat_all of nothing");
    while (parts.size() > 1) {
        std::vector<Tensor> next;
        for (size_t i = 0; i < parts.size(); i += 4) {
            size_t n = std::min<size_t>(4, parts.size() - i);
            if (n == 1) next.push_back(parts[i]);
            else next.push_back(b.concat({parts.begin() + i, parts.begin() + i + n}, axis));
        }
        parts = std::move(next);
    }
    return parts[0];
}

}  // namespace zoo

namespace {

std::string trim(const std::string &s) {
    size_t a = s.find_first_not_of(" \t\n\r"), z = s.find_last_not_of(" \t\n\r");
    return a == std::string::npos ? std::string() : s.substr(a, z - a + 1);
}

const char *kSpecSyntax = "expected NAME or NAME:key=value,key=value (e.g. mlp:layers=3,hidden=1024)";

}  // namespace

ModelSpec parse_model_spec(const std::string &text) {
    ModelSpec spec;
    size_t colon = text.find(':');
    spec.name = trim(text.substr(0, colon));
    TESSERA_CHECK(!spec.name.empty(), "model spec '", text, "' has no model name; ", kSpecSyntax,
                  "; models: ", zoo::join_names(model_names()));
    if (colon == std::string::npos) return spec;
    std::string rest = text.substr(colon + 1);
    TESSERA_CHECK(!trim(rest).empty(), "model spec '", text, "' has nothing after ':'; ", kSpecSyntax);
    std::stringstream items(rest);
    std::string item;
    while (std::getline(items, item, ',')) {
        size_t eq = item.find('=');
        TESSERA_CHECK(eq != std::string::npos, "model spec '", text, "': '", trim(item),
                      "' is not key=value; ", kSpecSyntax);
        std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
        TESSERA_CHECK(!key.empty(), "model spec '", text, "': '", trim(item), "' has no key before '='; ",
                      kSpecSyntax);
        TESSERA_CHECK(!value.empty(), "model spec '", text, "': parameter '", key, "' has no value after '='; ",
                      kSpecSyntax);
        TESSERA_CHECK(spec.params.emplace(key, value).second, "model spec '", text, "' sets parameter '", key,
                      "' twice");
    }
    // getline drops a trailing empty item, so "mlp:layers=3," would pass unnoticed.
    TESSERA_CHECK(rest.back() != ',', "model spec '", text, "' ends with ','; ", kSpecSyntax);
    return spec;
}

std::string model_spec_str(const ModelSpec &spec) {
    std::string out = spec.name;
    char sep = ':';
    for (const auto &[k, v] : spec.params) {
        out += sep + k + "=" + v;
        sep = ',';
    }
    return out;
}

std::vector<std::string> model_names() {
    std::vector<std::string> names;
    for (const zoo::ModelDef *d : zoo::registry()) names.push_back(d->name);
    return names;
}

namespace {

// The model `spec` names, once its parameters' names are checked.
const zoo::ModelDef &checked_model_def(const ModelSpec &spec) {
    const zoo::ModelDef *def = nullptr;
    for (const zoo::ModelDef *d : zoo::registry())
        if (d->name == spec.name) def = d;
    TESSERA_CHECK(def != nullptr, "unknown model '", spec.name, "' (spec '", model_spec_str(spec),
                  "'); valid models: ", zoo::join_names(model_names()));
    std::vector<std::string> valid;
    for (const zoo::ParamDef &p : def->params) valid.push_back(p.name);
    for (const auto &[key, value] : spec.params)
        TESSERA_CHECK(std::find(valid.begin(), valid.end(), key) != valid.end(), "model '", spec.name,
                      "' has no parameter '", key, "' (spec '", model_spec_str(spec),
                      "'); valid parameters: ", zoo::join_names(valid));
    return *def;
}

}  // namespace

Model build_model(const ModelSpec &spec, int64_t batch) {
    if (is_onnx_model(spec)) return import_onnx(spec, batch);
    const zoo::ModelDef &def = checked_model_def(spec);
    TESSERA_CHECK(batch >= 1, "model '", model_spec_str(spec), "': the batch size must be at least 1, got ",
                  batch);
    return def.build(zoo::Params(spec.name, spec), batch);
}

std::string canonical_model_spec(const std::string &text) {
    const ModelSpec spec = parse_model_spec(text);
    if (is_onnx_model(spec)) return model_spec_str(spec);  // the file is the model
    const zoo::Params params(spec.name, spec);
    checked_model_def(spec).build(params, 1);  // shapes only: milliseconds even for the largest models
    return model_spec_str(ModelSpec{spec.name, params.read()});
}

Model build_model(const std::string &spec, int64_t batch) { return build_model(parse_model_spec(spec), batch); }

void apply_precision(Model &m, Precision p, GradReduce grad) {
    const std::vector<TensorId> moved = apply_precision(m.graph, p, grad);
    for (TensorId *t : {&m.input, &m.labels, &m.logits, &m.loss})
        if (*t != kNoTensor) *t = moved[*t];
}

std::string models_help() {
    std::ostringstream os;
    os << "Models (--model NAME or NAME:key=value,...; every value is a positive integer unless noted):\n";
    for (const zoo::ModelDef *d : zoo::registry()) {
        os << "\n  " << d->name << ": " << d->summary << "\n";
        size_t width = 0;
        for (const zoo::ParamDef &p : d->params) width = std::max(width, p.name.size() + p.default_text.size());
        for (const zoo::ParamDef &p : d->params) {
            std::string head = p.name + "=" + p.default_text;
            os << "    " << head << std::string(width + 3 - head.size(), ' ') << p.meaning << "\n";
        }
    }
    os << "\n  FILE.onnx: a model exported by torch.onnx.export in training mode, opsets 13 to 17 (docs/onnx.md)"
       << (onnx_import_built() ? "" : "; this build cannot import ONNX (no libonnx-dev)") << "\n"
       << "    output=NAME   the graph output holding the logits, when there are several\n";
    return os.str();
}

std::string format_count(int64_t n) {
    static const struct {
        double scale;
        const char *suffix;
    } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (const auto &u : units) {
        if (static_cast<double>(n) < u.scale) continue;
        double v = static_cast<double>(n) / u.scale;
        char buf[32];
        // Three significant digits: 1.86M, 23.5M, 138M.
        std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v, u.suffix);
        return buf;
    }
    return std::to_string(n);
}

}  // namespace tessera
