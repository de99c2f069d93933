// The plan's JSON form. Reading checks every field's type and names the field by
// its path ("plan.json: 'ops[3].strategy[0]' must be a string"), because plans
// are written by one program and read by others (lowering, the renderers, people
// comparing runs), and a hand-edited plan should fail at the field, not later.
//
// Doubles are written with enough digits to read back bit for bit (nlohmann
// does this); infinities and NaN, which JSON lacks, are written as the strings
// "inf", "-inf" and "nan" rather than as null, so that they survive too.
#include "tessera/partition/plan.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/json_input.h"

namespace tessera {

using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "tessera-plan";
constexpr int kVersion = 1;

json double_json(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

// One reader per source: every error names the source and the field's path.
class Reader {
public:
    explicit Reader(std::string source) : source_(std::move(source)) {}

    [[noreturn]] void bad(const std::string &path, const std::string &what) const {
        fail(source_, ": '", path, "' ", what);
    }

    const json &at(const json &j, const std::string &path, const char *key) const {
        if (!j.contains(key)) fail(source_, ": missing field '", join(path, key), "'");
        return j.at(key);
    }

    const json &object(const json &j, const std::string &path) const {
        if (!j.is_object()) bad(path, "must be an object, got " + json_preview(j));
        return j;
    }
    const json &array(const json &j, const std::string &path) const {
        if (!j.is_array()) bad(path, "must be a list, got " + brief(j));
        return j;
    }

    std::string str(const json &j, const std::string &path) const {
        if (!j.is_string()) bad(path, "must be a string, got " + brief(j));
        return j.get<std::string>();
    }

    int64_t int64(const json &j, const std::string &path) const {
        if (j.is_number_unsigned()) {
            if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                bad(path, "is out of range, got " + json_preview(j));
            return static_cast<int64_t>(j.get<uint64_t>());
        }
        if (!j.is_number_integer()) bad(path, "must be an integer, got " + brief(j));
        return j.get<int64_t>();
    }

    int int32(const json &j, const std::string &path, int64_t lo = std::numeric_limits<int>::min()) const {
        int64_t v = int64(j, path);
        if (v < lo || v > std::numeric_limits<int>::max())
            bad(path, "must be an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(std::numeric_limits<int>::max()) + "], got " + std::to_string(v));
        return static_cast<int>(v);
    }

    int64_t bytes(const json &j, const std::string &path) const {
        int64_t v = int64(j, path);
        if (v < 0) bad(path, "must not be negative, got " + std::to_string(v));
        return v;
    }

    double number(const json &j, const std::string &path) const {
        if (j.is_number()) return j.get<double>();
        if (j.is_string()) {
            const auto &s = j.get_ref<const std::string &>();
            if (s == "inf") return std::numeric_limits<double>::infinity();
            if (s == "-inf") return -std::numeric_limits<double>::infinity();
            if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
        }
        bad(path, "must be a number, got " + brief(j));
    }

    Shape shape(const json &j, const std::string &path) const {
        Shape s;
        for (size_t i = 0; i < array(j, path).size(); i++) {
            int64_t d = int64(j[i], index(path, i));
            if (d < 0) bad(index(path, i), "must not be negative, got " + std::to_string(d));
            s.push_back(d);
        }
        return s;
    }

    template<typename F>
    auto list(const json &j, const std::string &path, F each) const {
        std::vector<decltype(each(j, path))> out;
        for (size_t i = 0; i < array(j, path).size(); i++) out.push_back(each(j[i], index(path, i)));
        return out;
    }

    static std::string join(const std::string &path, const char *key) {
        return path.empty() ? std::string(key) : path + "." + key;
    }
    static std::string index(const std::string &path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

    const std::string &source() const { return source_; }

private:
    // A value in an error message, cut short: a list of 10,000 ops is no help.
    static std::string brief(const json &j) { return json_preview(j); }

    std::string source_;
};

json machine_json(const Machine &m) {
    json levels = json::array();
    for (const LinkLevel &l : m.levels)
        levels.push_back({{"name", l.name},
                          {"count", l.count},
                          {"bandwidth", double_json(l.bandwidth)},
                          {"latency", double_json(l.latency)}});
    return {{"name", m.name}, {"levels", levels}};
}

Machine read_machine(const Reader &r, const json &j, const std::string &path) {
    r.object(j, path);
    Machine m;
    m.name = r.str(r.at(j, path, "name"), Reader::join(path, "name"));
    std::string lp = Reader::join(path, "levels");
    m.levels = r.list(r.at(j, path, "levels"), lp, [&](const json &e, const std::string &p) {
        r.object(e, p);
        LinkLevel l;
        l.name = r.str(r.at(e, p, "name"), Reader::join(p, "name"));
        l.count = r.int32(r.at(e, p, "count"), Reader::join(p, "count"), 1);
        l.bandwidth = r.number(r.at(e, p, "bandwidth"), Reader::join(p, "bandwidth"));
        l.latency = r.number(r.at(e, p, "latency"), Reader::join(p, "latency"));
        return l;
    });
    return m;
}

json memory_json(const MemoryFootprint &m) {
    return {{"weights", m.weights},
            {"gradients", m.gradients},
            {"optimizer_state", m.optimizer_state},
            {"activations", m.activations},
            {"working_copies", m.working_copies},
            {"comm_buffers", m.comm_buffers},
            {"total", m.total()}};
}

MemoryFootprint read_memory(const Reader &r, const json &j, const std::string &path) {
    r.object(j, path);
    MemoryFootprint m;
    m.weights = r.bytes(r.at(j, path, "weights"), Reader::join(path, "weights"));
    m.gradients = r.bytes(r.at(j, path, "gradients"), Reader::join(path, "gradients"));
    m.optimizer_state = r.bytes(r.at(j, path, "optimizer_state"), Reader::join(path, "optimizer_state"));
    m.activations = r.bytes(r.at(j, path, "activations"), Reader::join(path, "activations"));
    m.comm_buffers = r.bytes(r.at(j, path, "comm_buffers"), Reader::join(path, "comm_buffers"));
    // Plans older than reduced precision have none.
    if (j.contains("working_copies"))
        m.working_copies = r.bytes(j.at("working_copies"), Reader::join(path, "working_copies"));
    // The total is derived; a file whose total disagrees was edited or corrupted.
    if (j.contains("total")) {
        int64_t total = r.bytes(j.at("total"), Reader::join(path, "total"));
        if (total != m.total())
            r.bad(Reader::join(path, "total"),
                  "is " + std::to_string(total) + " but the categories sum to " + std::to_string(m.total()));
    }
    return m;
}

json op_json(const OpPlan &o) {
    return {{"node", o.node}, {"op", o.op},           {"group", o.group},
            {"strategy", o.strategy}, {"inputs", o.inputs}, {"outputs", o.outputs}};
}

OpPlan read_op(const Reader &r, const json &j, const std::string &path) {
    r.object(j, path);
    OpPlan o;
    o.node = r.str(r.at(j, path, "node"), Reader::join(path, "node"));
    o.op = r.str(r.at(j, path, "op"), Reader::join(path, "op"));
    o.group = r.int32(r.at(j, path, "group"), Reader::join(path, "group"), 0);
    auto names = [&](const char *key) {
        return r.list(r.at(j, path, key), Reader::join(path, key),
                      [&](const json &e, const std::string &p) { return r.str(e, p); });
    };
    o.strategy = names("strategy");
    o.inputs = names("inputs");
    o.outputs = names("outputs");
    return o;
}

json tensor_json(const TensorPlan &t) {
    json layout = json::array();
    for (const Layout &l : t.layout) layout.push_back(l.str());
    return {{"tensor", t.tensor},
            {"role", t.role},
            {"shape", t.shape},
            {"local_shape", t.local_shape},
            {"group", t.group},
            {"layout", layout},
            {"bytes", t.bytes},
            {"local_bytes", t.local_bytes},
            {"dtype", t.dtype}};
}

TensorPlan read_tensor(const Reader &r, const json &j, const std::string &path) {
    r.object(j, path);
    TensorPlan t;
    t.tensor = r.str(r.at(j, path, "tensor"), Reader::join(path, "tensor"));
    t.role = r.str(r.at(j, path, "role"), Reader::join(path, "role"));
    t.shape = r.shape(r.at(j, path, "shape"), Reader::join(path, "shape"));
    t.local_shape = r.shape(r.at(j, path, "local_shape"), Reader::join(path, "local_shape"));
    t.group = r.int32(r.at(j, path, "group"), Reader::join(path, "group"), 0);
    t.layout = r.list(r.at(j, path, "layout"), Reader::join(path, "layout"), [&](const json &e, const std::string &p) {
        return layout_from_str(r.str(e, p), r.source() + ": '" + p + "'");
    });
    t.bytes = r.bytes(r.at(j, path, "bytes"), Reader::join(path, "bytes"));
    t.local_bytes = r.bytes(r.at(j, path, "local_bytes"), Reader::join(path, "local_bytes"));
    if (j.contains("dtype")) {
        const std::string where = Reader::join(path, "dtype");
        t.dtype = dtype_name(dtype_from_name(r.str(j.at("dtype"), where), r.source() + ": '" + where + "'"));
    }
    return t;
}

json comm_json(const CommStep &c) {
    return {{"level", c.level},  {"kind", comm_kind_name(c.kind)}, {"node", c.node},
            {"tensor", c.tensor}, {"what", c.what},                 {"bytes", c.bytes},
            {"time_s", double_json(c.time_s)}};
}

CommStep read_comm(const Reader &r, const json &j, const std::string &path) {
    r.object(j, path);
    CommStep c;
    c.level = r.int32(r.at(j, path, "level"), Reader::join(path, "level"), 0);
    std::string kp = Reader::join(path, "kind");
    c.kind = comm_kind_from_name(r.str(r.at(j, path, "kind"), kp), r.source() + ": '" + kp + "'");
    c.node = r.str(r.at(j, path, "node"), Reader::join(path, "node"));
    c.tensor = r.str(r.at(j, path, "tensor"), Reader::join(path, "tensor"));
    c.what = r.str(r.at(j, path, "what"), Reader::join(path, "what"));
    c.bytes = r.bytes(r.at(j, path, "bytes"), Reader::join(path, "bytes"));
    c.time_s = r.number(r.at(j, path, "time_s"), Reader::join(path, "time_s"));
    return c;
}

}  // namespace

std::string plan_to_json(const Plan &p, int indent) {
    json cuts = json::array(), ops = json::array(), tensors = json::array(), comm = json::array();
    for (const Cut &c : p.cuts) cuts.push_back({{"k", c.k}, {"link", c.link}});
    for (const OpPlan &o : p.ops) ops.push_back(op_json(o));
    for (const TensorPlan &t : p.tensors) tensors.push_back(tensor_json(t));
    for (const CommStep &c : p.comm) comm.push_back(comm_json(c));
    json j = {{"format", kFormat},
              {"version", kVersion},
              {"model", p.model},
              {"strategy", p.strategy},
              {"devices", p.devices},
              {"machine", machine_json(p.machine)},
              {"cuts", cuts},
              {"ops_before_coarsening", p.ops_before_coarsening},
              {"ops_after_coarsening", p.ops_after_coarsening},
              {"tensors_before_coarsening", p.tensors_before_coarsening},
              {"tensors_after_coarsening", p.tensors_after_coarsening},
              {"ops", ops},
              {"tensors", tensors},
              {"comm", comm},
              {"level_bytes", p.level_bytes},
              {"search_bytes", p.search_bytes},
              {"comm_bytes", p.comm_bytes},
              {"predicted_comm_time_s", double_json(p.predicted_comm_time_s)},
              {"executable", p.executable},
              {"rank_comm_bytes", p.rank_comm_bytes},
              {"bucket_bytes", p.bucket_bytes},
              {"local_batch_norm", p.local_batch_norm},
              {"search_time_s", double_json(p.search_time_s)},
              {"memory", memory_json(p.memory)},
              {"per_device_peak_bytes", p.per_device_peak_bytes},
              {"single_device_peak_bytes", p.single_device_peak_bytes},
              {"notes", p.notes}};
    return j.dump(indent);
}

Plan plan_from_json(const std::string &text, const std::string &source) {
    const json j = parse_json_input(text, source);
    Reader r(source);
    TESSERA_CHECK(j.is_object(), source, ": a plan must be a JSON object with \"format\": \"", kFormat, "\"");
    std::string format = r.str(r.at(j, "", "format"), "format");
    TESSERA_CHECK(format == kFormat, source, ": 'format' is \"", format, "\", not \"", kFormat,
                  "\"; is this a plan written by tessera-plan --format json?");
    int64_t version = r.int64(r.at(j, "", "version"), "version");
    TESSERA_CHECK(version == kVersion, source, ": plan format version ", version,
                  " is not supported; this build reads version ", kVersion);

    Plan p;
    p.model = r.str(r.at(j, "", "model"), "model");
    p.strategy = r.str(r.at(j, "", "strategy"), "strategy");
    p.devices = r.int32(r.at(j, "", "devices"), "devices", 1);
    p.machine = read_machine(r, r.at(j, "", "machine"), "machine");
    p.cuts = r.list(r.at(j, "", "cuts"), "cuts", [&](const json &e, const std::string &path) {
        r.object(e, path);
        Cut c;
        c.k = r.int32(r.at(e, path, "k"), Reader::join(path, "k"), 1);
        c.link = r.int32(r.at(e, path, "link"), Reader::join(path, "link"), 0);
        if (c.link >= static_cast<int>(p.machine.levels.size()))
            r.bad(Reader::join(path, "link"), "is " + std::to_string(c.link) + " but the machine has " +
                                                  std::to_string(p.machine.levels.size()) + " levels");
        return c;
    });
    p.ops_before_coarsening = r.int32(r.at(j, "", "ops_before_coarsening"), "ops_before_coarsening", 0);
    p.ops_after_coarsening = r.int32(r.at(j, "", "ops_after_coarsening"), "ops_after_coarsening", 0);
    p.tensors_before_coarsening = r.int32(r.at(j, "", "tensors_before_coarsening"), "tensors_before_coarsening", 0);
    p.tensors_after_coarsening = r.int32(r.at(j, "", "tensors_after_coarsening"), "tensors_after_coarsening", 0);
    p.ops = r.list(r.at(j, "", "ops"), "ops",
                   [&](const json &e, const std::string &path) { return read_op(r, e, path); });
    p.tensors = r.list(r.at(j, "", "tensors"), "tensors",
                       [&](const json &e, const std::string &path) { return read_tensor(r, e, path); });
    p.comm = r.list(r.at(j, "", "comm"), "comm",
                    [&](const json &e, const std::string &path) { return read_comm(r, e, path); });
    p.level_bytes = r.list(r.at(j, "", "level_bytes"), "level_bytes",
                           [&](const json &e, const std::string &path) { return r.bytes(e, path); });
    p.comm_bytes = r.bytes(r.at(j, "", "comm_bytes"), "comm_bytes");

    p.predicted_comm_time_s = r.number(r.at(j, "", "predicted_comm_time_s"), "predicted_comm_time_s");
    if (j.contains("executable")) {
        if (!j.at("executable").is_boolean()) r.bad("executable", "must be true or false");
        p.executable = j.at("executable").get<bool>();
    }
    if (j.contains("rank_comm_bytes"))
        p.rank_comm_bytes = r.list(r.at(j, "", "rank_comm_bytes"), "rank_comm_bytes",
                                   [&](const json &e, const std::string &path) { return r.bytes(e, path); });
    // A plan written before fused collectives ran one collective per tensor.
    if (j.contains("bucket_bytes")) p.bucket_bytes = r.bytes(j.at("bucket_bytes"), "bucket_bytes");
    if (j.contains("local_batch_norm")) {
        if (!j.at("local_batch_norm").is_boolean()) r.bad("local_batch_norm", "must be true or false");
        p.local_batch_norm = j.at("local_batch_norm").get<bool>();
    }
    // A plan written before search_bytes: its comm_bytes was the search's count.
    p.search_bytes = j.contains("search_bytes") ? r.bytes(j.at("search_bytes"), "search_bytes") : p.comm_bytes;
    if (!j.contains("search_bytes") && p.executable) p.comm_bytes = p.lowered_comm_bytes();
    p.search_time_s = r.number(r.at(j, "", "search_time_s"), "search_time_s");
    p.memory = read_memory(r, r.at(j, "", "memory"), "memory");
    p.per_device_peak_bytes = r.bytes(r.at(j, "", "per_device_peak_bytes"), "per_device_peak_bytes");
    p.single_device_peak_bytes = r.bytes(r.at(j, "", "single_device_peak_bytes"), "single_device_peak_bytes");
    p.notes = r.list(r.at(j, "", "notes"), "notes",
                     [&](const json &e, const std::string &path) { return r.str(e, path); });
    return p;
}

}  // namespace tessera
