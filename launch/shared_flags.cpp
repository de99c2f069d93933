#include "shared_flags.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera {

namespace {

// A validator for a finite number above `low` (or at least it, unless strict).
CLI::Validator number_from(double low, bool strict, const std::string &description) {
    return CLI::Validator(
        [low, strict](std::string &text) -> std::string {
            double v = 0;
            size_t used = 0;
            try {
                v = std::stod(text, &used);
            } catch (const std::exception &) {
                used = 0;
            }
            if (used == 0 || used != text.size()) return "'" + text + "' is not a number";
            if (!std::isfinite(v)) return "must be a finite number, got " + text;
            if (strict ? v <= low : v < low)
                return fmt::format("must be {} {:g}, got {}", strict ? "above" : "at least", low, text);
            return "";
        },
        description);
}

}  // namespace

CLI::Validator positive_number() { return number_from(0, true, "POSITIVE"); }
CLI::Validator non_negative_number() { return number_from(0, false, "NONNEGATIVE"); }


void add_partition_flags(CLI::App &app, PartitionFlags &flags, const std::string &when) {
    // "Under mpirun: fix ..." or "Fix ...".
    auto help = [&](const std::string &text) {
        std::string s = when + text;
        if (when.empty() && !s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
        return s;
    };
    app.add_option("--force", flags.force,
                   help("fix operators' strategies at every cut: OPERATOR=VARIABLE[,...], e.g. 'bn1=n' (a '*' at "
                        "the end of a name matches every operator it prefixes; VARIABLE may be 'replicate')"));
    app.add_option("--weights", flags.weights,
                   help("fix weights' layouts at every cut: WEIGHT=replicate|split[,...], e.g. 'fc1.w=split' (a "
                        "'*' at the end of a name matches every weight it prefixes); each weight's gradient and "
                        "optimizer state follow it, and the search chooses the rest"));
    app.add_flag("--no-staged-reductions", flags.no_staged_reductions,
                 help("keep every operator that reduces inside itself (batch norm, softmax, layer norm) whole "
                      "along its reduction in the plan tessera-train runs, unless --force splits it; by default "
                      "such operators may split and combine their statistics across devices (synchronised batch "
                      "norm)"));
    app.add_flag("--no-replicate-weights", flags.no_replicate_weights,
                 help("do not let the search replicate weights, so that each device holds 1/N of the model "
                      "(this excludes data parallelism from Tofu's space)"));
    app.add_option("--bucket-mb", flags.bucket_mb,
                   help("fuse each device's all-reduces of one group into buckets of this many MiB, each one "
                        "collective issued as soon as its last tensor is made (as PyTorch DDP's bucket_cap_mb); 0 "
                        "runs one collective per tensor"))
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    app.add_flag("--sync-batch-norm", flags.sync_batch_norm,
                 help("with the ddp and fsdp strategies: synchronise batch norm's statistics over the global "
                      "batch (SyncBatchNorm; ddp is then the data strategy); by default each device normalises by "
                      "its own block's statistics, as PyTorch DDP does (every other strategy synchronises)"));
}

std::vector<CLI::Option *> add_swap_search_flags(CLI::App &app, int &population, int &generations, int &patience,
                                                 double &time_limit_s) {
    // The old tessera-plan names stay as aliases.
    return {app.add_option("--swap-population,--population", population, "Population of the swap planner's search")
                ->check(CLI::Range(2, 100000))
                ->capture_default_str(),
            app.add_option("--swap-generations,--generations", generations,
                           "Generations of the swap planner's search, at most")
                ->check(tessera::positive_number())
                ->capture_default_str(),
            app.add_option("--swap-patience", patience,
                           "Stop the swap planner's search once this many generations in a row have not improved "
                           "its best predicted step by 0.1% (0: only --swap-generations and --swap-time-limit stop "
                           "it)")
                ->check(tessera::non_negative_number())
                ->capture_default_str(),
            app.add_option("--swap-time-limit,--time-limit", time_limit_s, "Seconds the swap planner may search")
                ->check(tessera::positive_number())
                ->capture_default_str()};
}

CLI::Option *add_host_updates_flag(CLI::App &app, std::string &value) {
    return app
        .add_option("--host-updates", value,
                    "Optimizer updates of host-homed weights that the swap planner may run on the host (after "
                    "ZeRO-Offload: the gradient goes to the host, the moments never cross the link): off, auto "
                    "(the planner chooses each) or all")
        ->check(CLI::IsMember({"off", "auto", "all"}))
        ->capture_default_str();
}

CLI::Option *add_recompute_flag(CLI::App &app, std::string &value) {
    return app
        .add_option("--recompute", value,
                    "Whether the swap planner may drop forward activations and recompute them before their next "
                    "use instead of swapping them (Capuchin, Checkmate): off or auto (it chooses each)")
        ->check(CLI::IsMember({"off", "auto"}))
        ->capture_default_str();
}

void refuse_empty_values(const CLI::App &app) {
    for (const CLI::Option *opt : app.get_options()) {
        if (opt->get_type_size_max() == 0) continue;  // a flag: no value to be empty
        for (const std::string &value : opt->results())
            if (value.empty())
                throw CLI::ValidationError(opt->get_name(), "the value is empty; give a value or leave the flag out");
    }
}

CLI::Option *add_precision_flag(CLI::App &app, std::string &value) {
    return app
        .add_option("--precision", value,
                    "Storage and arithmetic of the step: fp32, tf32 (f32 storage, tf32 matrix products on a GPU; "
                    "fp32 on the CPU), bf16 or fp16 (activations and working weights in 16 bits, f32 master "
                    "weights and optimizer state, as autocast). bf16 is what to use on a GPU")
        ->capture_default_str();
}

CLI::Option *add_grad_reduce_flag(CLI::App &app, std::string &value) {
    return app
        .add_option("--grad-reduce-dtype", value,
                    "With --precision bf16: fp32 computes each weight gradient into f32, sums it over its uses "
                    "and across devices in f32 (exact sums; twice the bytes); bf16 rounds it to bf16 and reduces "
                    "bf16 (Megatron's default)")
        ->capture_default_str();
}

namespace {

// What `parse` reads from a flag's value, its error prefixed with the flag.
template <typename T>
T parse_flag(const char *flag, T (*parse)(const std::string &), const std::string &value) {
    try {
        return parse(value);
    } catch (const Error &e) {
        fail(flag, ": ", e.what());
    }
}

}  // namespace

GradReduce read_grad_reduce(const std::string &value) {
    return parse_flag("--grad-reduce-dtype", grad_reduce_from_name, value);
}

Precision read_precision(const std::string &value) { return parse_flag("--precision", precision_from_name, value); }

}  // namespace tessera
