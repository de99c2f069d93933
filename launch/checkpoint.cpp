#include "checkpoint.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/exec/safetensors.h"
#include "tessera/models/zoo.h"

namespace tessera {

namespace {

constexpr const char *kFormat = "tessera-checkpoint-1";

bool saved(const TensorInfo &t) { return t.role == TensorRole::Param || t.role == TensorRole::OptState; }

std::string float_str(double v) { return fmt::format("{}", v); }

}  // namespace

CheckpointInfo checkpoint_info(const TrainOptions &o, int64_t steps_per_epoch) {
    CheckpointInfo info;
    info.steps_per_epoch = steps_per_epoch;
    info.seed = o.seed;
    const OptimizerConfig &c = o.optimizer;
    info.identity = {
        {"model", model_spec_str(parse_model_spec(o.model))},
        {"batch", std::to_string(o.batch)},
        {"optimizer", optimizer_name(c.kind)},
        {"lr", float_str(c.lr)},
        {"weight_decay", float_str(c.weight_decay)},
        {"seed", std::to_string(o.seed)},
        {"data", o.data},
        {"lr_schedule", o.lr_schedule},
    };
    if (c.kind == OptimizerConfig::Kind::Sgd) info.identity["momentum"] = float_str(c.momentum);
    else info.identity["adam"] = fmt::format("{},{},{}", c.beta1, c.beta2, c.eps);
    return info;
}

std::string checkpoint_path(const std::string &dir) {
    return (std::filesystem::path(dir) / "checkpoint.safetensors").string();
}

bool checkpoint_exists(const std::string &dir) { return std::filesystem::exists(checkpoint_path(dir)); }

void remove_stale_checkpoint_temporaries(const std::string &dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return;
    const std::string prefix = atomic_temp_prefix(checkpoint_path(dir));
    for (const auto &e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
}

void save_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store,
                     int64_t step) {
    std::vector<StTensor> tensors;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &ti = g.tensor(t);
        if (!saved(ti)) continue;
        StTensor st;
        st.name = ti.name;
        st.dtype = to_st_dtype(ti.type.dtype);
        st.shape = ti.type.shape;
        st.data.resize(ti.type.bytes());
        store.read(t, st.data.data(), st.data.size());
        tensors.push_back(std::move(st));
    }
    if (!store.root()) return;
    std::map<std::string, std::string> meta = info.identity;
    meta["format"] = kFormat;
    meta["step"] = std::to_string(step);
    nlohmann::json rng = {{"seed", info.seed},
                          {"data_epoch", info.steps_per_epoch ? step / info.steps_per_epoch : 0},
                          {"data_batch", info.steps_per_epoch ? step % info.steps_per_epoch : 0}};
    meta["rng"] = rng.dump();
    write_safetensors(checkpoint_path(dir), tensors, meta);
}

int64_t load_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store) {
    const std::string path = checkpoint_path(dir);
    StFile f = read_safetensors(path);
    auto meta = [&](const std::string &key) -> const std::string & {
        auto it = f.metadata.find(key);
        TESSERA_CHECK(it != f.metadata.end(), path, ": not a Tessera checkpoint (no '", key, "' in its metadata)");
        return it->second;
    };
    TESSERA_CHECK(meta("format") == kFormat, path, ": checkpoint format '", meta("format"), "', this build reads '",
                  kFormat, "'");
    for (const auto &[key, want] : info.identity) {
        const std::string &have = meta(key);
        TESSERA_CHECK(have == want, path, ": the checkpoint was written with ", key, " '", have,
                      "' but this run uses '", want, "'; resume with the same ", key,
                      " or use a new --checkpoint directory");
    }
    int64_t step = 0;
    try {
        step = std::stoll(meta("step"));
    } catch (const std::exception &) {
        fail(path, ": bad step '", meta("step"), "' in the metadata");
    }
    TESSERA_CHECK(step >= 0, path, ": negative step ", step);
    // The data position must agree with the step: the order is a function of the
    // seed and the epoch only.
    auto rng = nlohmann::json::parse(meta("rng"), nullptr, false);
    TESSERA_CHECK(!rng.is_discarded() && rng.value("seed", uint64_t{0}) == info.seed, path,
                  ": the RNG state does not match the seed");
    if (info.steps_per_epoch)
        TESSERA_CHECK(rng.value("data_epoch", int64_t{-1}) == step / info.steps_per_epoch &&
                          rng.value("data_batch", int64_t{-1}) == step % info.steps_per_epoch,
                      path, ": the data position in the RNG state does not match step ", step,
                      " (a different dataset size?)");
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &ti = g.tensor(t);
        if (!saved(ti)) continue;
        const StTensor &st = f.get(ti.name, ti.type.dtype, ti.type.shape);
        store.write(t, st.data.data(), st.data.size());
    }
    return step;
}

}  // namespace tessera
