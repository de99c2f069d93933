#include "tessera/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/atomic_file.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/error.h"
#include "tessera/json_input.h"
#include "tessera/models/zoo.h"

namespace tessera {

namespace {

constexpr const char *kFormat = "tessera-checkpoint-1";

bool saved(const TensorInfo &t) { return t.role == TensorRole::Param || t.role == TensorRole::OptState; }

// The first NaN or infinity among a float tensor's elements (index -1 when
// all are finite, and for integer tensors).
struct NonFinite {
    int64_t index = -1;
    double value = 0;
};
NonFinite first_non_finite(const StTensor &t) {
    auto scan = [&](auto element) -> NonFinite {
        using T = decltype(element);
        for (int64_t i = 0; i < t.elements(); i++) {
            T v;
            std::memcpy(&v, t.data.data() + i * sizeof(T), sizeof(T));
            if (!std::isfinite(v)) return {i, static_cast<double>(v)};
        }
        return {};
    };
    if (t.dtype == StDType::F32) return scan(float{});
    if (t.dtype == StDType::F64) return scan(double{});
    return {};
}

// Throws naming the first tensor that holds a NaN or an infinity: `where`
// says whose tensors they are, `advice` what to do.
void check_finite(const std::vector<StTensor> &tensors, const std::string &where, const std::string &advice) {
    for (const StTensor &t : tensors) {
        const NonFinite bad = first_non_finite(t);
        TESSERA_CHECK(bad.index < 0, where, ": tensor '", t.name, "' holds ", bad.value, " at element ", bad.index,
                      " of ", t.elements(), "; ", advice);
    }
}

// The identity keys in the order a mismatch is best explained: what the run
// is before the settings of its parts (the optimizer before its momentum).
std::vector<std::string> identity_order(const CheckpointInfo &info) {
    std::vector<std::string> keys = {"model", "optimizer"};
    for (const auto &[key, value] : info.identity)
        if (key != "model" && key != "optimizer") keys.push_back(key);
    return keys;
}

// Whether the checkpoint's `have` names the same run setting as `want`; a
// model is compared by its canonical spec (defaults filled in), since older
// checkpoints hold the spec as it was given.
bool same_identity(const std::string &key, const std::string &have, const std::string &want) {
    if (have == want) return true;
    if (key != "model") return false;
    try {
        return canonical_model_spec(have) == want;
    } catch (const Error &) {
        return false;  // not a model this build knows: a mismatch
    }
}

}  // namespace

std::string checkpoint_path(const std::string &dir) {
    return (std::filesystem::path(dir) / "checkpoint.safetensors").string();
}

bool checkpoint_exists(const std::string &dir) {
    std::error_code ec;  // a --checkpoint under a file has no checkpoint; prepare_checkpoint_dir says why
    return std::filesystem::exists(checkpoint_path(dir), ec);
}

CheckpointDirLock &CheckpointDirLock::operator=(CheckpointDirLock &&o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

// Locks DIR/.tessera.lock and writes this process into it; when another
// process holds it, an error naming that process (as it wrote itself).
CheckpointDirLock lock_checkpoint_dir(const std::string &dir) {
    const std::string path = (std::filesystem::path(dir) / ".tessera.lock").string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    TESSERA_CHECK(fd >= 0, "--checkpoint: cannot create the lock file '", path, "': ", std::strerror(errno));
    CheckpointDirLock lock(fd);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int error = errno;
        char holder[256] = {};
        const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
        std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
        while (!who.empty() && who.back() == '\n') who.pop_back();
        TESSERA_CHECK(error != EWOULDBLOCK, "--checkpoint ", dir, " is in use by another run (", who,
                      "); give each run a directory of its own");
        fail("--checkpoint: cannot lock '", path, "': ", std::strerror(error));
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string me = "process " + std::to_string(::getpid()) + " on " + host + "\n";
    if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) < 0) {
        // The lock holds without its note; the note only names the holder.
    }
    return lock;
}

}  // namespace

CheckpointDirLock prepare_checkpoint_dir(const std::string &dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TESSERA_CHECK(!ec, "--checkpoint: cannot create the directory '", dir, "': ", ec.message());
    CheckpointDirLock lock = lock_checkpoint_dir(dir);
    remove_stale_checkpoint_temporaries(dir);
    return lock;
}

void remove_stale_checkpoint_temporaries(const std::string &dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return;
    const std::string prefix = atomic_temp_prefix(checkpoint_path(dir));
    for (const auto &e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
}

void save_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store,
                     int64_t step, const std::string &loss_scaler) {
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
    check_finite(tensors, fmt::format("cannot write the checkpoint of step {} to {}", step, checkpoint_path(dir)),
                 "training diverged; lower --lr");
    std::map<std::string, std::string> meta = info.identity;
    meta["format"] = kFormat;
    meta["step"] = std::to_string(step);
    nlohmann::json rng = {{"seed", info.seed},
                          {"data_epoch", info.steps_per_epoch ? step / info.steps_per_epoch : 0},
                          {"data_batch", info.steps_per_epoch ? step % info.steps_per_epoch : 0}};
    meta["rng"] = rng.dump();
    if (!loss_scaler.empty()) meta["loss_scaler"] = loss_scaler;
    write_safetensors(checkpoint_path(dir), tensors, meta);
}

std::string state_dict_path(const std::string &dir) {
    return (std::filesystem::path(dir) / "model.safetensors").string();
}

std::vector<StTensor> step_counters(const Graph &g, int64_t step) {
    const std::string suffix = ".running_mean";
    std::vector<StTensor> out;
    for (TensorId t : running_statistics(g)) {
        const std::string &name = g.tensor(t).name;
        if (name.size() > suffix.size() && name.ends_with(suffix))
            out.push_back(StTensor::i64_scalar(name.substr(0, name.size() - suffix.size()) + ".num_batches_tracked",
                                               step));
    }
    return out;
}

bool optional_in_checkpoint(const Graph &g, TensorId t) {
    const std::vector<TensorId> stats = running_statistics(g);
    return std::find(stats.begin(), stats.end(), t) != stats.end();
}

void save_state_dict(const std::string &dir, const Model &m, TensorStore &store, int64_t step) {
    std::vector<StTensor> tensors;
    std::vector<TensorId> saved_ids = m.graph.with_role(TensorRole::Param);
    for (TensorId t : running_statistics(m.graph)) saved_ids.push_back(t);
    for (TensorId t : saved_ids) {
        const TensorInfo &ti = m.graph.tensor(t);
        StTensor st{ti.name, to_st_dtype(ti.type.dtype), ti.type.shape, std::vector<std::byte>(ti.type.bytes())};
        store.read(t, st.data.data(), st.data.size());
        tensors.push_back(std::move(st));
    }
    if (!store.root()) return;
    for (StTensor &c : step_counters(m.graph, step)) tensors.push_back(std::move(c));
    write_safetensors(state_dict_path(dir), tensors, {{"format", "pt"}, {"step", std::to_string(step)}});
}

namespace {

// A checkpoint's metadata, read strictly: every value named in errors with the file.
class CheckpointMeta {
public:
    explicit CheckpointMeta(const StFile &f) : f_(f) {}

    const std::string &text(const std::string &key) const {
        auto it = f_.metadata.find(key);
        TESSERA_CHECK(it != f_.metadata.end(), f_.path, ": not a Tessera checkpoint (no '", key,
                      "' in its metadata)");
        return it->second;
    }

    // The whole text as a non-negative integer: "2xyz", "-1" and "" are refused.
    int64_t count(const std::string &key) const {
        const std::string &t = text(key);
        int64_t v = -1;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        TESSERA_CHECK(ec == std::errc() && end == t.data() + t.size() && v >= 0, f_.path, ": bad ", key, " '", t,
                      "' in the metadata; expected a whole number of at least 0");
        return v;
    }

    // The rng entry's integer field `field`; any other JSON or type is refused.
    template<typename T>
    T rng_field(const char *field) const {
        const nlohmann::json rng = parse_json_input(text("rng"), f_.path + ": the 'rng' metadata");
        TESSERA_CHECK(rng.is_object() && rng.contains(field) && rng.at(field).is_number_integer() &&
                          (std::is_signed_v<T> || rng.at(field).is_number_unsigned()),
                      f_.path, ": the 'rng' metadata has no integer '", field, "' (a damaged checkpoint?)");
        return rng.at(field).get<T>();
    }

private:
    const StFile &f_;
};

// The checkpoint's settings against this run's: the first that differs is named.
void check_identity(const CheckpointMeta &meta, const CheckpointInfo &info, const std::string &path) {
    TESSERA_CHECK(meta.text("format") == kFormat, path, ": checkpoint format '", meta.text("format"),
                  "', this build reads '", kFormat, "'");
    for (const std::string &key : identity_order(info)) {
        const std::string &want = info.identity.at(key), &have = meta.text(key);
        TESSERA_CHECK(same_identity(key, have, want), path, ": the checkpoint was written with ", key, " '", have,
                      "' but this run uses '", want, "'; resume with the same ", key,
                      " or use a new --checkpoint directory");
    }
}

}  // namespace

int64_t load_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store,
                        std::string *loss_scaler) {
    const std::string path = checkpoint_path(dir);
    StFile f = read_safetensors(path);
    const CheckpointMeta meta(f);
    check_identity(meta, info, path);
    const int64_t step = meta.count("step");
    // The data position must agree with the step: the order is a function of the
    // seed and the epoch only.
    TESSERA_CHECK(meta.rng_field<uint64_t>("seed") == info.seed, path, ": the RNG state does not match the seed");
    if (info.steps_per_epoch)
        TESSERA_CHECK(meta.rng_field<int64_t>("data_epoch") == step / info.steps_per_epoch &&
                          meta.rng_field<int64_t>("data_batch") == step % info.steps_per_epoch,
                      path, ": the data position in the RNG state does not match step ", step,
                      " (a different dataset size?)");
    check_finite(f.tensors, path,
                 "the checkpoint is damaged, or its run diverged; start a new --checkpoint directory");
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &ti = g.tensor(t);
        if (!saved(ti) || (!f.has(ti.name) && optional_in_checkpoint(g, t))) continue;
        const StTensor &st = f.get(ti.name, ti.type.dtype, ti.type.shape);
        store.write(t, st.data.data(), st.data.size());
    }
    if (loss_scaler) {
        auto it = f.metadata.find("loss_scaler");
        *loss_scaler = it == f.metadata.end() ? std::string() : it->second;
    }
    return step;
}

}  // namespace tessera
