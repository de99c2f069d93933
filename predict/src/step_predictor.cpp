#include "tessera/predict/step_predictor.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/host_threads.h"
#include "tessera/partition/lower.h"
#include "tessera/pipeline/rank_stages.h"
#include "tessera/program/program.h"
#include "tessera/sim/step_sim.h"
#include "tessera/text.h"

namespace tessera {

namespace {

// What one rank runs, and what it needs: the inputs of simulate_step.
struct RankRun {
    Graph graph;
    Program program;
    std::vector<double> node_s;
    std::vector<double> host_node_s;  // host updates' times; empty without swapping
    int64_t arena_bytes = 0;
    int64_t comm_bytes = 0;
};

// The rank's stages (pipeline/rank_stages.h) within the context's budget: a
// rank over it runs the swap planner's plan, the advisor with recomputation
// and host updates, on the roofline's times, for the context's search time.
RankSpec rank_spec(const BenchContext &ctx) {
    RankSpec s;
    if (ctx.device_mem > 0) s.budget = ctx.device_mem;
    s.budget_is_limit = true;
    s.swap.search.host_updates = HostUpdates::Auto;
    s.swap.search.time_limit_s = ctx.search_s;
    s.swap.search.generations = 1000000;  // the time limit alone decides
    s.swap.search.patience = 0;
    return s;
}

RankRun rank_run(Graph graph, int64_t comm_bytes, const BenchContext &ctx, MemoryPlanCache &plans) {
    RankRun r;
    r.graph = std::move(graph);
    RankPlan p = plan_rank(r.graph, rank_spec(ctx), roofline_timer(ctx.device, HostUpdates::Auto), &plans);
    r.program = std::move(p.train);
    r.arena_bytes = p.arena;
    r.comm_bytes = comm_bytes;
    if (p.swaps) {
        r.node_s = std::move(p.swaps->times.node_time_s);
        r.host_node_s = std::move(p.swaps->train.host_node_time_s);
    } else {
        r.node_s = roofline_node_times(r.graph, ctx.device);
    }
    return r;
}

// Simulates the ranks' step and fills the row's times, bytes and memory.
void simulate_into(const std::vector<RankRun> &runs, const Machine &machine, const BenchContext &ctx, BenchRow &row) {
    std::vector<RankProgram> ranks;
    ranks.reserve(runs.size());
    for (const RankRun &r : runs) ranks.push_back({&r.graph, &r.program, r.node_s, {}, r.host_node_s});
    StepSimOptions opt;
    opt.machine = machine;
    opt.swap_in_bandwidth = opt.swap_out_bandwidth = ctx.device.host_bytes_per_s;
    opt.batch = ctx.batch;
    const StepPrediction p = simulate_step(ranks, opt);
    const RankStepTime &slow = p.ranks.at(p.slowest_rank);
    row.devices = machine.devices();
    row.step_s = p.step_s;
    row.throughput = p.throughput;
    row.slowest_rank = p.slowest_rank;
    row.compute_s = slow.compute_s;
    row.exposed_comm_s = slow.exposed_comm_s;
    row.exposed_swap_s = slow.exposed_swap_s;
    row.idle_s = slow.idle_s;
    row.comm_bytes = 0;
    row.memory_bytes = 0;
    for (const RankRun &r : runs) {
        row.comm_bytes += r.comm_bytes;
        row.memory_bytes = std::max(row.memory_bytes, r.arena_bytes);
    }
}

// Runs work(r) for every rank, on as many threads as the host has cores (at
// most 8), a batch of ranks at a time; progress(done) after each batch, on the
// calling thread. Lowering a rank reads only the shared graph and plan, and
// each rank writes only its own result, so the order of the threads changes
// nothing in the output. The first exception a rank throws is rethrown.
void for_each_rank(int n, const std::function<void(int)> &work, const std::function<void(int)> &progress) {
    const int threads = tessera::host_planning_threads();
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    auto guarded = [&](int r) {
        try {
            work(r);
        } catch (...) {
            errors[static_cast<size_t>(r)] = std::current_exception();
        }
    };
    for (int first = 0; first < n; first += threads) {
        const int last = std::min(n, first + threads);
        std::vector<std::thread> pool;
        for (int r = first + 1; r < last; r++) pool.emplace_back(guarded, r);
        guarded(first);
        for (std::thread &t : pool) t.join();
        for (int r = first; r < last; r++)
            if (errors[static_cast<size_t>(r)]) std::rethrow_exception(errors[static_cast<size_t>(r)]);
        progress(last);
    }
}

void say(const BenchContext &ctx, const std::string &text) {
    if (ctx.progress) ctx.progress(text);
}

}  // namespace

// Builds the ranks' runs with `build`; under a device budget, a rank that
// cannot fit even with swapping makes the row a note instead of an error.
bool build_runs(const BenchContext &ctx, BenchRow &row, const std::function<void()> &build) {
    try {
        build();
        return true;
    } catch (const Error &e) {
        if (ctx.device_mem == 0) throw;
        row.note = e.what();
        row.memory_bytes = ctx.device_mem;
        return false;
    }
}

BenchRow predict_single(const std::string &model, const Graph &training, const BenchContext &ctx) {
    say(ctx, fmt::format("{} on one device", model));
    std::vector<RankRun> runs;
    MemoryPlanCache plans;
    BenchRow row;
    row.model = model;
    row.strategy = "single";
    if (build_runs(ctx, row, [&] { runs.push_back(rank_run(training, 0, ctx, plans)); }))
        simulate_into(runs, flat_machine(1), ctx, row);
    return row;
}

PartitionOptions bench_partition_options(const std::string &model, PartitionStrategy strategy,
                                         const BenchContext &ctx) {
    PartitionOptions o;
    o.strategy = strategy;
    o.model = model;
    o.executable = true;
    o.replicate_weights = true;
    o.bucket_bytes = bucket_bytes_within(ctx.bucket_bytes, ctx.device_mem);
    return o;
}

BenchRow predict_partitioned(const std::string &model, const Graph &training, const Machine &machine,
                             PartitionStrategy strategy, const BenchContext &ctx) {
    const std::string name = partition_strategy_name(strategy);
    if (machine.devices() == 1) {
        BenchRow row = predict_single(model, training, ctx);
        row.strategy = name;
        return row;
    }
    say(ctx, fmt::format("{} on {} devices: partitioning", name, machine.devices()));
    const Plan plan = partition(training, machine, bench_partition_options(model, strategy, ctx));
    return predict_plan(model, training, machine, plan, name, ctx);
}

BenchRow predict_plan(const std::string &model, const Graph &training, const Machine &machine, const Plan &plan,
                      const std::string &name, const BenchContext &ctx) {
    const int n = machine.devices();
    std::vector<RankRun> runs(static_cast<size_t>(n));
    MemoryPlanCache plans;
    BenchRow row;
    row.model = model;
    row.strategy = name;
    row.devices = n;
    const bool built = build_runs(ctx, row, [&] {
        const PlanLowering lowering(training, plan);
        for_each_rank(n, [&](int r) {
            DeviceGraph dg = lowering.rank(r);
            runs[static_cast<size_t>(r)] = rank_run(std::move(dg.graph), dg.comm_bytes, ctx, plans);
        }, [&](int done) { say(ctx, fmt::format("{} on {} devices: lowered {} of {} ranks", name, n, done, n)); });
    });
    if (!built) return row;
    say(ctx, fmt::format("{} on {} devices: simulating the step", name, n));
    simulate_into(runs, machine, ctx, row);
    return row;
}

BenchRow predict_swapped(const std::string &model, const Graph &training, int64_t budget, SwapPolicy policy,
                         double search_s, const BenchContext &ctx) {
    say(ctx, fmt::format("{} under {}: planning swaps", swap_policy_name(policy), format_bytes(budget)));
    BenchRow row;
    row.model = model;
    row.strategy = swap_policy_name(policy);
    RankSpec spec;  // the planner's own defaults: updates on the device, no recomputation
    spec.budget = budget;
    spec.swap.when = SwapWhen::Always;
    spec.swap.search = SwapOptions{};
    spec.swap.search.policy = policy;
    spec.swap.search.host_updates = HostUpdates::Off;
    spec.swap.search.time_limit_s = search_s;
    std::vector<RankRun> runs(1);
    try {
        RankPlan p = plan_rank(training, spec, roofline_timer(ctx.device, HostUpdates::Off));
        runs[0].program = std::move(p.train);
        runs[0].node_s = std::move(p.swaps->times.node_time_s);
        runs[0].comm_bytes = p.swaps->train.swap_in_bytes + p.swaps->train.swap_out_bytes;
    } catch (const Error &e) {  // a budget that cannot work: the row says why
        row.memory_bytes = budget;
        row.note = e.what();
        return row;
    }
    runs[0].graph = training;
    runs[0].arena_bytes = budget;
    simulate_into(runs, flat_machine(1), ctx, row);
    return row;
}

void fill_speedups(std::vector<BenchRow> &rows, const BenchRow &single) {
    for (BenchRow &r : rows) {
        r.speedup = r.step_s > 0 ? single.step_s / r.step_s : 0;
        r.efficiency = r.speedup / r.devices;
    }
}

Machine machine_scaled_to(const Machine &like, int devices) {
    TESSERA_CHECK(devices >= 1, "a device count must be at least 1, got ", devices);
    if (like.devices() == devices) return like;
    TESSERA_CHECK(!like.levels.empty(), "machine '", like.name, "' has no levels");
    std::vector<LinkLevel> kept(like.levels.size());
    int left = devices;
    for (size_t i = like.levels.size(); i-- > 1;) {  // innermost first; the outermost takes the rest
        int take = std::min(left, like.levels[i].count);
        while (left % take != 0) take--;
        kept[i] = like.levels[i];
        kept[i].count = take;
        left /= take;
    }
    kept[0] = like.levels[0];
    kept[0].count = left;
    Machine m;
    m.name = fmt::format("{} scaled to {} devices", like.name, devices);
    for (const LinkLevel &l : kept)
        if (l.count > 1) m.levels.push_back(l);
    if (m.levels.empty()) m.levels.push_back(like.levels.back()), m.levels.back().count = 1;
    return m;
}

}  // namespace tessera
