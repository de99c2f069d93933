// tessera-bench-swap: the swap planner against its baselines, and its speed.
//
//   --ratios         for each model at memory ratios 2, 4, 8 and 12 (budget =
//                    unconstrained footprint / ratio), the predicted iteration
//                    time of ideal, lru, vdnn and advisor side by side, with
//                    node times profiled on the CPU device (or --roofline cpu)
//                    and the host bandwidth measured. Exits 1 when advisor is
//                    slower than lru or vdnn anywhere.
//   --host-gbps G    with --roofline: the host link at G GB/s a direction
//                    instead of the preset's (the H100 run of 2026-11-27
//                    measured 46 to 50 GB/s while swapping, against h100's 25)
//   --recompute      off or auto (default): whether the advisor may recompute
//                    activations instead of swapping them
//   --host-updates   off, auto (default) or all: which Adam updates the advisor
//                    may run on the host (SwapOptions::host_updates)
//   --planner-speed  a training graph of about 1000 operators: the GA once for
//                    --long-s seconds (default 600) and once for --short-s
//                    (default 30); the gap between them, and when the short
//                    run first came within 5% of the long run's best.
//   --quick          small models, short searches: a CI-sized run of both.
//
// Times are ratios to ideal measured in one run (STYLE.md, benchmarks): the
// absolute milliseconds of a shared 2-core machine mean little.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/profile.h"
#include "tessera/host_threads.h"
#include "tessera/pipeline/rank_stages.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/predict/roofline.h"
#include "tessera/size.h"
#include "tessera/swap/swap_plan.h"

namespace {

using namespace tessera;

struct Args {
    bool ratios = false, speed = false, quick = false;
    std::string roofline;  // empty: profile on the CPU device
    double host_gbps = 0;  // > 0: the host link's speed, instead of the roofline's
    double long_s = 600, short_s = 30, limit_s = 10;
    double speed_ratio = 4;
    uint64_t seed = 1;
    std::vector<std::string> models;  // empty: all five
    HostUpdates host_updates = HostUpdates::Auto;  // for the advisor
    bool recompute = true;                         // for the advisor
    // The advisor's scoring threads: as tessera-plan, one per hardware thread, at most 8.
    int threads = tessera::host_planning_threads();
};

[[noreturn]] void usage(const std::string &msg) {
    std::cerr << "tessera-bench-swap: " << msg
              << "\nusage: tessera-bench-swap [--ratios] [--planner-speed] [--quick] [--roofline cpu|h100]\n"
                 "         [--limit-s S] [--long-s S] [--short-s S] [--speed-ratio R] [--seed N] "
                 "[--models mlp,cnn,...]\n"
                 "         [--host-updates off|auto|all] [--recompute off|auto] [--threads N] [--host-gbps G]\n";
    std::exit(2);
}

double number(const std::string &flag, const char *text) {
    char *end = nullptr;
    double v = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(v > 0)) usage(flag + " needs a positive number, got '" + text + "'");
    return v;
}

Args parse_args(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string f = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) usage(f + " needs a value");
            return argv[++i];
        };
        if (f == "--ratios") a.ratios = true;
        else if (f == "--planner-speed") a.speed = true;
        else if (f == "--quick") a.quick = true;
        else if (f == "--roofline") a.roofline = value();
        else if (f == "--long-s") a.long_s = number(f, value());
        else if (f == "--short-s") a.short_s = number(f, value());
        else if (f == "--limit-s") a.limit_s = number(f, value());
        else if (f == "--speed-ratio") a.speed_ratio = number(f, value());
        else if (f == "--host-gbps") a.host_gbps = number(f, value());
        else if (f == "--seed") a.seed = static_cast<uint64_t>(number(f, value()));
        else if (f == "--threads") {
            double v = number(f, value());
            if (v != std::floor(v) || v > 64) usage("--threads takes a whole number from 1 to 64");
            a.threads = static_cast<int>(v);
        }
        else if (f == "--recompute") {
            std::string v = value();
            if (v != "off" && v != "auto") usage("--recompute takes off or auto, got '" + v + "'");
            a.recompute = v == "auto";
        } else if (f == "--host-updates") {
            try {
                a.host_updates = host_updates_from_name(value());
            } catch (const Error &e) {
                usage(e.what());
            }
        }
        else if (f == "--models") {
            std::string list = value();
            for (size_t s = 0, c; s <= list.size(); s = c + 1) {
                c = list.find(',', s);
                if (c == std::string::npos) c = list.size();
                if (c > s) a.models.push_back(list.substr(s, c - s));
            }
        } else if (f == "--help" || f == "-h") usage("the swap planner's benchmarks");
        else usage("unknown flag '" + f + "'");
    }
    if (a.host_gbps > 0 && a.roofline.empty())
        usage("--host-gbps sets a roofline's host link; without --roofline the link is measured");
    if (!a.ratios && !a.speed) a.ratios = a.speed = a.quick;  // --quick alone runs both, small
    if (!a.ratios && !a.speed) a.ratios = true;
    if (a.quick) {
        a.long_s = std::min(a.long_s, 6.0);
        a.short_s = std::min(a.short_s, 2.0);
        a.limit_s = std::min(a.limit_s, 1.0);
    }
    return a;
}

double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string ms(double s) { return fmt::format("{:.2f} ms", s * 1e3); }

struct Case {
    std::string name, spec;
    int64_t batch;
};

// Big enough that swapping has choices to make, small enough that profiling
// takes seconds on 2 cores. Each model's largest operator must fit a twelfth
// of its footprint for the 12x row to exist, so these are deep and narrow:
// footprint / smallest workable budget is 27 (mlp), 21 (lstm), 16
// (transformer) and 19 (wresnet). No cnn config gets past about 2: its first
// convolution's input, output and gradients are most of the footprint, so
// its 4x to 12x rows report the budget as infeasible.
std::vector<Case> cases(bool quick) {
    if (quick)
        return {{"mlp", "mlp:layers=32,hidden=128,input=64", 16},
                {"cnn", "cnn:convs=3,channels=4,hidden=0", 8},
                {"lstm", "lstm:layers=8,hidden=32,seq=4,vocab=16", 16},
                {"transformer", "transformer:layers=4,d_model=64,heads=4,seq=16,vocab=200", 4},
                {"wresnet", "wresnet:depth=50,width=1,base=4,image=16", 2}};
    return {{"mlp", "mlp:layers=32,hidden=512,input=256", 64},
            {"cnn", "cnn:convs=4,channels=16,hidden=64", 16},
            {"lstm", "lstm:layers=8,hidden=64,seq=8,vocab=32", 64},
            {"transformer", "transformer:layers=8,d_model=256,heads=4,seq=64,vocab=256", 8},
            {"wresnet", "wresnet:depth=152,width=1,base=8,image=32", 4}};
}

// Node times for `g` and the host link, measured on a CPU device (or taken
// from a roofline preset).
struct Timing {
    OpTimes times;        // host_node_time_s: optimizer nodes on the host
    double seconds = 0;  // spent measuring
};

Timing measure(const Graph &g, const std::vector<NodeId> &order, int64_t footprint, const Args &a) {
    Timing t;
    double t0 = now_s();
    if (!a.roofline.empty()) {
        RooflineDevice dev = roofline_device(a.roofline);
        if (a.host_gbps > 0) dev.host_bytes_per_s = a.host_gbps * 1e9;
        t.times = roofline_op_times(g, dev, HostUpdates::Auto);
    } else {
        CpuDevice device(footprint);
        ProfileOptions po;
        po.repeats = a.quick ? 1 : 3;
        OpTimes &times = t.times;
        times.node_time_s = profile_nodes(g, order, device, po);
        // The CPU device's kernels are the host's: the same times.
        times.host_node_time_s.assign(times.node_time_s.size(), 0.0);
        for (NodeId n = 0; n < g.num_nodes(); ++n)
            if (g.node(n).optimizer) times.host_node_time_s[n] = times.node_time_s[n];
        int64_t probe = std::min<int64_t>(footprint, 64 << 20);
        times.h2d_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::HostToDevice, probe);
        times.d2h_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::DeviceToHost, probe);
    }
    t.seconds = now_s() - t0;
    return t;
}

// One row of --ratios: the four policies' plans of `problem` at its budget,
// and the bound no plan can beat. `ok` turns false when the advisor is slower
// than a baseline or faster than the bound (which would make the bound wrong).
std::string ratio_row(const std::string &model, double ratio, const SwapProblem &problem, const Args &a,
                      bool &ok) {
    double times[4] = {0, 0, 0, 0};
    double search = 0;
    int64_t candidates = 0;
    int on_host = 0, recomputed = 0;
    const SwapPolicy policies[4] = {SwapPolicy::Ideal, SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Advisor};
    for (int i = 0; i < 4; ++i) {
        SwapOptions o;
        o.policy = policies[i];
        o.seed = a.seed;
        o.time_limit_s = a.limit_s;
        o.generations = 1000000;  // the time limit decides
        o.host_updates = a.host_updates;
        o.recompute = a.recompute;
        o.threads = a.threads;
        SwapPlan p = plan_swaps(problem, o);
        times[i] = p.time_s;
        if (policies[i] != SwapPolicy::Advisor) continue;
        search = p.search_s;
        candidates = p.candidates;
        for (const SwapStep &s : p.steps) {
            on_host += s.kind == SwapStep::Kind::HostUpdate;
            recomputed += s.kind == SwapStep::Kind::Recompute;
        }
    }
    SwapBound bound = swap_lower_bound(problem, a.host_updates);
    // A tolerance for rounding in the simulator's sums only.
    auto within = [](double x, double y) { return x <= y * (1 + 1e-9); };
    bool vs_lru = within(times[3], times[1]), vs_vdnn = within(times[3], times[2]);
    bool above_bound = within(bound.time_s, times[3]);
    ok = ok && vs_lru && vs_vdnn && above_bound;
    return fmt::format("{:<12} {:>5.0f}x {:>11} {:>11} {:>11} {:>11} {:>11} {:>8.1f}% {:>8.1f}% {:>19} {:>6} {:>6} "
                       "{:>7.1f} {:>8} {:>7} {:>7}",
                       model, ratio, format_bytes(problem.budget), ms(times[0]), ms(times[1]), ms(times[2]),
                       ms(times[3]), 100 * times[0] / times[3], 100 * times[0] / bound.time_s,
                       above_bound ? bound.limit : std::string("BELOW"), vs_lru ? "yes" : "NO",
                       vs_vdnn ? "yes" : "NO", search, candidates, on_host, recomputed);
}

// The problem of one model, without its budget.
SwapProblem problem_of(const Graph &g, const std::vector<NodeId> &order, const Timing &t, const Args &a) {
    return make_swap_problem(g, order, t.times, 0, a.host_updates);
}

int run_ratios(const Args &a) {
    const std::vector<double> ratios = {2, 4, 8, 12};
    std::vector<std::string> rows;
    bool all_ok = true;
    for (const Case &c : cases(a.quick)) {
        if (!a.models.empty() && std::find(a.models.begin(), a.models.end(), c.name) == a.models.end()) continue;
        Graph g = build_training_graph(c.spec, c.batch);
        const RankMemory memory = plan_rank_memory(g);
        const std::vector<NodeId> &order = memory.order;
        const int64_t footprint = memory.memory.arena_bytes;
        std::cout << fmt::format("{} (batch {}): {} nodes, footprint {}; measuring node times{}...", c.spec, c.batch,
                                 g.num_nodes(), format_bytes(footprint),
                                 a.roofline.empty() ? " on the CPU device" : " from roofline " + a.roofline)
                  << std::flush;
        Timing t = measure(g, order, footprint, a);
        std::cout << fmt::format(" {:.1f} s; host link {:.2f} / {:.2f} GB/s\n", t.seconds, t.times.h2d_bytes_per_s / 1e9,
                                 t.times.d2h_bytes_per_s / 1e9);
        SwapProblem problem = problem_of(g, order, t, a);
        for (double ratio : ratios) {
            problem.budget = static_cast<int64_t>(static_cast<double>(footprint) / ratio);
            int64_t need = min_swap_budget(problem, a.host_updates);
            if (need > problem.budget)
                rows.push_back(fmt::format("{:<12} {:>5.0f}x {:>11}  infeasible: one operator needs {}", c.name,
                                           ratio, format_bytes(problem.budget), format_bytes(need)));
            else
                rows.push_back(ratio_row(c.name, ratio, problem, a, all_ok));
            std::cout << rows.back() << "\n" << std::flush;
        }
    }
    std::cout << "\n"
              << fmt::format("{:<12} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>19} {:>6} {:>6} {:>7} "
                             "{:>8} {:>7} {:>7}\n",
                             "model", "ratio", "budget", "ideal", "lru", "vdnn", "advisor", "of ideal", "bound",
                             "bound by", "<=lru", "<=vdnn", "GA s", "scored", "on host", "recomp");
    for (const std::string &r : rows) std::cout << r << "\n";
    std::cout << "bound: the most of ideal any plan can reach (swap_lower_bound: the busiest stream's unavoidable "
                 "work, or the busiest before the backward pass starts plus the busiest after); bound by: those "
                 "streams; scored: candidates the advisor simulated, on "
              << a.threads << (a.threads == 1 ? " thread\n" : " threads\n");
    std::cout << (all_ok ? "advisor is at least as fast as lru and vdnn everywhere, and no faster than the bound\n"
                         : "FAIL: advisor is slower than a baseline (NO above) or faster than the bound (BELOW)\n");
    return all_ok ? 0 : 1;
}

// The smallest transformer (or, in --quick, mlp) whose training graph has at
// least `want` nodes.
std::pair<std::string, Graph> graph_of_size(int want, bool quick) {
    for (int layers = 1; layers <= 400; ++layers) {
        std::string spec = quick ? fmt::format("mlp:layers={},hidden=64", layers)
                                 : fmt::format("transformer:layers={},d_model=128,heads=4,seq=32,vocab=500", layers);
        Graph g = build_training_graph(spec, quick ? 16 : 4);
        if (g.num_nodes() >= want) return {spec, std::move(g)};
    }
    fail("no model config reaches ", want, " nodes");
}

struct Trace {
    std::vector<std::pair<double, double>> best;  // (elapsed s, best time) after each generation
    SwapPlan plan;
};

Trace search(const SwapProblem &problem, double limit_s, uint64_t seed, const char *label) {
    Trace t;
    SwapOptions o;
    o.policy = SwapPolicy::Advisor;
    o.seed = seed;
    o.time_limit_s = limit_s;
    o.generations = 100000000;
    double last_print = 0;
    o.progress = [&](const SwapProgress &p) {
        t.best.push_back({p.elapsed_s, p.best_time_s});
        if (p.elapsed_s - last_print >= 10) {
            last_print = p.elapsed_s;
            std::cout << fmt::format("  {} run: {:.0f} s, generation {}, {} schedules, best {}\n", label, p.elapsed_s,
                                     p.generation, p.candidates, ms(p.best_time_s))
                      << std::flush;
        }
    };
    t.plan = plan_swaps(problem, o);
    return t;
}

int run_speed(const Args &a) {
    auto [spec, g] = graph_of_size(1000, a.quick);
    const RankMemory memory = plan_rank_memory(g);
    const std::vector<NodeId> &order = memory.order;
    const int64_t footprint = memory.memory.arena_bytes;
    std::cout << fmt::format("\nplanner speed: {} ({} nodes), footprint {}, budget footprint / {:.0f}; one core\n",
                             spec, g.num_nodes(), format_bytes(footprint), a.speed_ratio);
    Timing t = measure(g, order, footprint, a);
    SwapProblem problem = problem_of(g, order, t, a);
    problem.host_node_time_s.clear();  // the planner's speed, on swaps alone
    problem.budget = static_cast<int64_t>(static_cast<double>(footprint) / a.speed_ratio);
    int64_t need = min_swap_budget(problem);
    if (need > problem.budget) fail("planner speed: the budget ", format_bytes(problem.budget),
                                    " is below one operator's ", format_bytes(need), "; give a smaller --speed-ratio");
    std::cout << fmt::format("  long run: {:.0f} s limit\n", a.long_s) << std::flush;
    Trace lng = search(problem, a.long_s, a.seed, "long");
    std::cout << fmt::format("  short run: {:.0f} s limit\n", a.short_s) << std::flush;
    Trace sht = search(problem, a.short_s, a.seed, "short");
    double target = lng.plan.time_s * 1.05;
    double within = -1;
    for (const auto &[at, best] : sht.best)
        if (best <= target) {
            within = at;
            break;
        }
    double ideal = lng.plan.ideal_time_s;
    std::cout << fmt::format("{:<8} {:>9} {:>12} {:>10} {:>13} {:>9}\n", "run", "limit", "best", "of ideal",
                             "generations", "search");
    for (const auto &[name, tr, lim] : {std::tuple{"long", &lng, a.long_s}, std::tuple{"short", &sht, a.short_s}})
        std::cout << fmt::format("{:<8} {:>8.0f}s {:>12} {:>9.1f}% {:>13} {:>8.1f}s\n", name, lim, ms(tr->plan.time_s),
                                 100 * ideal / tr->plan.time_s, tr->plan.generations, tr->plan.search_s);
    std::cout << fmt::format("gap: the short run's best is {:+.2f}% of the long run's\n",
                             100 * (sht.plan.time_s / lng.plan.time_s - 1));
    if (within >= 0)
        std::cout << fmt::format("the short run came within 5% of the long run's best after {:.2f} s\n", within);
    else
        std::cout << "the short run never came within 5% of the long run's best\n";
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv);
    try {
        int rc = 0;
        if (a.ratios) rc |= run_ratios(a);
        if (a.speed) rc |= run_speed(a);
        return rc;
    } catch (const tessera::Error &e) {
        std::cerr << "tessera-bench-swap: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "tessera-bench-swap: internal error: " << e.what() << "\n";
        return 3;
    }
}
