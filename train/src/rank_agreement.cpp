#include "tessera/train/rank_agreement.h"

#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/models/onnx_import.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/render.h"

namespace tessera {

namespace {

// FNV-1a: the same on every host and build, unlike std::hash.
uint64_t fingerprint(const std::string &text) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    return h;
}

std::string joined(const std::vector<std::string> &lines) {
    std::string s;
    for (const std::string &l : lines) s += l + "\n";
    return s;
}

std::vector<std::string> split_lines(const char *text, size_t size) {
    std::vector<std::string> lines;
    std::string line;
    for (size_t i = 0; i < size && text[i] != '\0'; i++) {
        if (text[i] != '\n') line += text[i];
        else lines.push_back(std::move(line)), line.clear();
    }
    if (!line.empty()) lines.push_back(line + "...");  // cut at kDescriptionBytes
    return lines;
}

// Every rank's description, cut to kDescriptionBytes (the same size from every rank).
std::vector<std::vector<std::string>> gather_descriptions(Communicator &comm, const std::string &mine) {
    std::vector<char> send(kDescriptionBytes, '\0'), all(kDescriptionBytes * static_cast<size_t>(comm.size()));
    std::memcpy(send.data(), mine.data(), std::min(mine.size(), kDescriptionBytes - 1));
    comm.all_gather(send.data(), all.data(), kDescriptionBytes, comm.world_group());
    std::vector<std::vector<std::string>> out;
    for (int r = 0; r < comm.size(); r++)
        out.push_back(split_lines(all.data() + static_cast<size_t>(r) * kDescriptionBytes, kDescriptionBytes));
    return out;
}

// The message for ranks 0 and `other`, whose descriptions differ.
std::string difference(const std::vector<std::string> &first, const std::vector<std::string> &second, int other) {
    const size_t n = std::max(first.size(), second.size());
    for (size_t i = 0; i < n; i++) {
        const std::string a = i < first.size() ? first[i] : "(nothing)", b = i < second.size() ? second[i] : "(nothing)";
        if (a != b) return fmt::format("rank 0 has '{}' but rank {} has '{}'", a, other, b);
    }
    return fmt::format("ranks 0 and {} differ past the first {} bytes of their descriptions", other, kDescriptionBytes);
}

// The canonical spec; for an ONNX file, with a fingerprint of its bytes, so
// that ranks on hosts holding different files of one name disagree here.
std::string model_line(const std::string &spec) {
    try {
        const ModelSpec parsed = parse_model_spec(spec);
        if (is_onnx_model(parsed)) return canonical_model_spec(spec) + " file " + onnx_file_fingerprint(parsed.name);
        return canonical_model_spec(spec);
    } catch (const Error &) {
        return spec;  // every rank fails on it later, alike
    }
}

}  // namespace

std::vector<std::string> run_arguments(const TrainOptions &o) {
    const OptimizerConfig &opt = o.optimizer;
    auto optional = [](const std::optional<int64_t> &v) { return v ? std::to_string(*v) : std::string("-"); };
    return {
        "--model " + model_line(o.model), "--batch " + std::to_string(o.batch), "--precision " + std::string(precision_name(o.precision)),
        "--grad-reduce-dtype " + std::string(grad_reduce_name(o.grad_reduce)),
        "--seed " + std::to_string(o.seed), "--epochs " + optional(o.epochs), "--steps " + optional(o.steps),
        "--data " + o.data, fmt::format("--shuffle {}", o.shuffle), "--data-dir " + o.data_dir, "--synthetic-size " + std::to_string(o.synthetic_size),
        fmt::format("--optimizer {} --lr {} --momentum {} --weight-decay {}", optimizer_name(opt.kind), opt.lr,
                    opt.momentum, opt.weight_decay),
        "--lr-schedule " + std::string(lr_schedule_name(o.lr_schedule)), "--device-mem " + o.device_mem, "--swap " + swap_choice_name(o.swap_when, o.swap_search.policy),
        fmt::format("--swap-population {} --swap-generations {} --swap-patience {} --swap-time-limit {}",
                    o.swap_search.population, o.swap_search.generations, o.swap_search.patience,
                    o.swap_search.time_limit_s),
        "--checkpoint " + o.checkpoint_dir, "--checkpoint-every " + std::to_string(o.checkpoint_every),
        fmt::format("--resume {} --eval {} --simulate-steps {}", o.resume, o.eval, o.simulate_steps),
        "--partition " + o.partition,
        fmt::format("--force {} --weights {} --no-staged-reductions {} --no-replicate-weights {} --bucket-mb {} "
                    "--sync-batch-norm {}",
                    o.partition_flags.force, o.partition_flags.weights, o.partition_flags.no_staged_reductions,
                    o.partition_flags.no_replicate_weights, o.partition_flags.bucket_mb,
                    o.partition_flags.sync_batch_norm),
        "--plan " + o.plan_path, "--nodes " + std::to_string(o.nodes), "--machine " + o.machine_path,
        "--comm " + std::string(comm_choice_name(o.comm_backend)),
    };
}

std::vector<std::string> plan_identity(const Plan &plan) {
    Plan timeless = plan;
    timeless.search_time_s = 0;  // the one field that differs between runs
    timeless.model.clear();      // the spec as spelled; run_arguments compared it canonically
    return {"machine " + machine_str(plan.machine) + ": " + machine_links_str(plan.machine),
            "cuts " + cuts_str(plan), fmt::format("plan {:016x}", fingerprint(plan_to_json(timeless)))};
}

void agree_across_ranks(Communicator &comm, const std::string &what, const std::vector<std::string> &lines,
                        const std::string &advice) {
    const std::string mine = joined(lines);
    const uint64_t hash = fingerprint(mine);
    std::vector<uint64_t> hashes(static_cast<size_t>(comm.size()));
    comm.all_gather(&hash, hashes.data(), sizeof hash, comm.world_group());
    int other = 0;
    for (int r = 1; r < comm.size() && other == 0; r++)
        if (hashes[static_cast<size_t>(r)] != hashes[0]) other = r;
    if (other == 0) return;
    // Every rank saw the same hashes, so every rank takes part in this exchange too.
    const std::vector<std::vector<std::string>> all = gather_descriptions(comm, mine);
    fail("the ranks disagree on their ", what, ": ", difference(all[0], all[static_cast<size_t>(other)], other), "; ",
         advice);
}

}  // namespace tessera
