// plan_swaps: the genetic algorithm (SwapAdvisor) and the baselines.
//
// A chromosome holds three things:
//   * a priority per operator: a priority-list schedule (always run the ready
//     operator of highest priority) turns it into a topological order, so
//     that crossover and mutation can never produce an invalid order;
//     communication operators keep their relative order through the
//     dependencies;
//   * a weight per size class: after every class gets the fewest slots its
//     operators need, the remaining pool bytes are split in proportion;
//   * a pinned fraction f: persistent buffers are pinned, most uses per byte
//     first, within f of what the smallest pools leave of the budget;
//   * with host updates (SwapOptions::host_updates auto), a bit per optimizer
//     node that may run on the host: whether it does (all set, with all);
//   * with recomputation (SwapOptions::recompute), a bit per forward
//     activation: dropped and recomputed when evicted, instead of swapped.
//     Where a candidate's recomputations cannot run, the bit the scheduler
//     blames is cleared, in the candidate too, until they can (at most
//     kRepairs bits a child, and a seed as many as half the time limit
//     allows; past that it scores as infinitely slow).
// The fitness is the simulated iteration time of the schedule the swap
// scheduler makes for it. A generation's children are made in turn (one
// random stream) and then scored on SwapOptions::threads threads, each with
// its own scratch, so that the plan does not depend on the number of threads
// (while `generations`, not the time limit, ends the search). The population
// starts from the given order with demand-proportional pools and a spread of
// pinned fractions (which are also the layouts the baselines use), plus
// perturbations of it, some with the optimizer updates as early as they can
// run and some with every activation dropped that is cheaper to recompute
// than to swap (seed_priorities, seed_drop).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <queue>
#include <random>
#include <thread>
#include <unordered_map>

#include "internal.h"
#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {
namespace swap_detail {
namespace {

using Clock = std::chrono::steady_clock;

// How many recompute bits Search::score may clear to make a candidate feasible.
constexpr int kRepairs = 16;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Arithmetic on the raw engine output, so that a seed gives the same numbers
// with any standard library.
struct Rng {
    std::mt19937_64 e;
    explicit Rng(uint64_t seed) : e(seed) {}
    double uniform() { return static_cast<double>(e() >> 11) * (1.0 / 9007199254740992.0); }
    int below(int n) { return static_cast<int>(uniform() * n); }
};

// One thread's scratch for decoding and scoring candidates.
struct Workspace {
    std::vector<int> indeg;
    std::vector<NodeId> order;
    Layout layout;
    Scheduler sched;
    Schedule schedule;
    std::vector<double> end;
    std::vector<int> cleared;  // recompute bits a repair cleared
};

struct Genome {
    std::vector<double> prio;  // per position of the given order
    std::vector<double> weight;
    std::vector<uint8_t> host;  // per Prepared::host_nodes entry
    std::vector<uint8_t> drop;  // per Prepared::recompute_bufs entry
    double f = 0;
    double fit = 0;
};

class Search {
public:
    Search(const Prepared &p, const SwapOptions &o)
        : p_(p), o_(o), rng_(o.seed), ws_(static_cast<size_t>(o.threads)) {
        int n = static_cast<int>(p.order.size());
        succ_begin_.assign(n + 1, 0);
        for (int i = 0; i < n; i++)
            for (int k = p.pred_begin[i]; k < p.pred_begin[i + 1]; k++) succ_begin_[p.preds[k] + 1]++;
        for (int i = 0; i < n; i++) succ_begin_[i + 1] += succ_begin_[i];
        succ_.resize(p.preds.size());
        std::vector<int> fill(succ_begin_.begin(), succ_begin_.end() - 1);
        for (int i = 0; i < n; i++)
            for (int k = p.pred_begin[i]; k < p.pred_begin[i + 1]; k++) succ_[fill[p.preds[k]]++] = i;
        max_pin_ = std::max<int64_t>(0, max_pinnable(p, p.classes));
        drop_index_.assign(p.bufs.size(), -1);
        for (size_t k = 0; k < p.recompute_bufs.size(); k++) drop_index_[p.recompute_bufs[k]] = static_cast<int>(k);
    }

    // The layout a pinned fraction and class weights give (weights empty:
    // demand-proportional).
    void decode_layout(const Genome &g, Layout &layout) const {
        decode_layout(g.f, g.weight, g.host, layout);
        layout.recompute.assign(g.drop.empty() ? 0 : p_.bufs.size(), 0);
        for (size_t k = 0; k < g.drop.size(); k++) layout.recompute[p_.recompute_bufs[k]] = g.drop[k];
        layout.split = true;
    }

    void decode_layout(double f, const std::vector<double> &weights, const std::vector<uint8_t> &host,
                       Layout &layout) const {
        layout.host.assign(host.empty() ? 0 : p_.host_ok.size(), 0);
        for (size_t k = 0; k < host.size(); k++)
            layout.host[p_.host_nodes[k]] = host[k] || p_.host_fixed[p_.host_nodes[k]];
        // Updates on the device whose operands leave the pools no room: all
        // go to the host (pick_classes made sure that fits).
        const std::vector<int64_t> no_pins(p_.bufs.size(), -1);
        if (!layout.host.empty() && pool_bytes(p_.classes, min_slots(p_, p_.classes, no_pins, &layout.host)) > p_.budget)
            layout.host = p_.host_ok;
        choose_pins(p_, static_cast<int64_t>(std::floor(f * static_cast<double>(max_pin_))), layout);
        if (weights.empty()) split_pools(p_, p_.classes, demand_weights(p_, p_.classes, layout.pin), layout);
        else split_pools(p_, p_.classes, weights, layout);
    }

    void decode_order(const std::vector<double> &prio, Workspace &w) const {
        int n = static_cast<int>(p_.order.size());
        w.order.clear();
        if (!o_.reorder) {
            w.order = p_.order;
            return;
        }
        w.indeg.assign(n, 0);
        for (int i = 0; i < n; i++) w.indeg[i] = p_.pred_begin[i + 1] - p_.pred_begin[i];
        std::priority_queue<std::pair<double, int>> ready;
        for (int i = 0; i < n; i++)
            if (w.indeg[i] == 0) ready.push({prio[i], -i});
        while (!ready.empty()) {
            int i = -ready.top().second;
            ready.pop();
            w.order.push_back(p_.order[i]);
            for (int k = succ_begin_[i]; k < succ_begin_[i + 1]; k++)
                if (--w.indeg[succ_[k]] == 0) ready.push({prio[succ_[k]], -succ_[k]});
        }
        TESSERA_INTERNAL_ASSERT(static_cast<int>(w.order.size()) == n, "the dependencies have a cycle");
    }

    // Decodes g into w and returns the key of what it decoded to (candidates
    // with the same order, layout and bits have the same fitness).
    uint64_t decode(const Genome &g, Workspace &w) const {
        decode_order(g.prio, w);
        decode_layout(g, w.layout);
        uint64_t h = 1469598103934665603ull;
        auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
        if (o_.reorder)
            for (NodeId n : w.order) mix(static_cast<uint64_t>(n));
        for (int s : w.layout.slots) mix(static_cast<uint64_t>(s) + 0x9e37);
        for (int64_t v : w.layout.pin) mix(static_cast<uint64_t>(v + 1));
        for (uint8_t v : g.host) mix(v + 0x51u);
        for (uint8_t v : g.drop) mix(v + 0x77u);
        return h;
    }

    // The simulated step of what w holds decoded from g (infinite where its
    // recomputations cannot run even after kRepairs repairs, whose cleared
    // bits go back into g: children stay feasible, near their parents). A
    // seed goes on repairing, kRepairs bits at a time, until half the time
    // limit has gone (the rest is the generations').
    double score(Genome &g, Workspace &w, bool seed) const {
        w.cleared.clear();
        bool ok = false;
        for (size_t before = 0;; before = w.cleared.size()) {
            ok = schedule_repairing(w.sched, p_, w.order, p_.classes, w.layout, kRepairs, w.schedule, &w.cleared);
            const bool more = w.cleared.size() - before == static_cast<size_t>(kRepairs);
            if (ok || !seed || !more || seconds_since(t0_) >= o_.time_limit_s / 2) break;
        }
        for (int b : w.cleared) g.drop[drop_index_[b]] = 0;
        return ok ? simulate_schedule(p_, w.schedule, w.end) : std::numeric_limits<double>::infinity();
    }

    // Sets g's fitness, from the cache or scored in w; `key` gets its key.
    // Returns whether the cache had it.
    bool fitness(Genome &g, Workspace &w, uint64_t &key, bool seed = false) const {
        key = decode(g, w);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            g.fit = it->second;
            return true;
        }
        g.fit = score(g, w, seed);
        return false;
    }

    double evaluate(Genome &g, bool seed) {
        uint64_t key = 0;
        if (!fitness(g, ws_[0], key, seed)) remember(key, g.fit);
        return g.fit;
    }

    void remember(uint64_t key, double fit) { candidates_ += cache_.emplace(key, fit).second; }

    // Scores gs[from..] on the threads: each takes every threads-th
    // candidate, reading the cache (nothing writes it meanwhile); what was
    // new is remembered afterwards.
    void evaluate_all(std::vector<Genome> &gs, size_t from) {
        const size_t n = gs.size() - from;
        std::vector<uint64_t> keys(n);
        std::vector<uint8_t> known(n, 0);
        const size_t threads = ws_.size();
        auto work = [&](size_t t) {
            for (size_t i = t; i < n; i += threads) known[i] = fitness(gs[from + i], ws_[t], keys[i]);
        };
        std::vector<std::thread> helpers;
        for (size_t t = 1; t < threads && t < n; t++) helpers.emplace_back(work, t);
        work(0);
        for (std::thread &h : helpers) h.join();
        for (size_t i = 0; i < n; i++)
            if (!known[i]) remember(keys[i], gs[from + i].fit);
    }

    // The first population, scored: the exact seeds (the given order, the
    // baselines' layouts), then perturbations of them, until `timed_out`.
    template <typename TimedOut>
    std::vector<Genome> seed_population(int pop_size, TimedOut timed_out) {
        const double fs[] = {0.0, 1.0, 0.5, 0.25, 0.75, 0.9, 0.0, 1.0, 0.5, 0.25, 0.75, 0.9};
        std::vector<Genome> pop;
        Layout tmp;
        bool out_of_time = false;
        for (int k = 0; k < pop_size && !out_of_time; k++) {
            Genome g;
            bool exact = k < (host_bits() ? 12 : 6);
            g.prio = seed_priorities(k, exact);
            g.f = exact ? fs[k] : rng_.uniform();
            g.host = seed_host(k);
            g.drop = seed_drop(k, exact);
            decode_layout(g.f, {}, g.host, tmp);
            g.weight = demand_weights(p_, p_.classes, tmp.pin);
            if (!exact)
                for (double &w : g.weight) w *= std::exp((rng_.uniform() - 0.5) * 2);
            evaluate(g, true);
            pop.push_back(std::move(g));
            out_of_time = timed_out();
        }
        return pop;
    }

    SwapPlan run() {
        t0_ = Clock::now();
        const Clock::time_point t0 = t0_;
        int n = static_cast<int>(p_.order.size());
        int nc = static_cast<int>(p_.classes.bytes.size());
        int pop_size = std::max(2, o_.population);
        auto timed_out = [&]() { return seconds_since(t0) >= o_.time_limit_s; };
        std::vector<Genome> pop = seed_population(pop_size, timed_out);
        bool out_of_time = timed_out();
        auto better = [](const Genome &a, const Genome &b) { return a.fit < b.fit; };
        int gens = 0;
        // The best time at the last generation that improved it by
        // kSwapImprovement, and that generation (for patience).
        double mark = pop.empty() ? 0 : std::min_element(pop.begin(), pop.end(), better)->fit;
        int marked_at = 0;
        bool patience_out = false;
        for (; gens < o_.generations && !out_of_time && !patience_out; gens++) {
            std::stable_sort(pop.begin(), pop.end(), better);
            std::vector<Genome> next(pop.begin(), pop.begin() + std::min<int>(2, static_cast<int>(pop.size())));
            const size_t elite = next.size();
            while (static_cast<int>(next.size()) < pop_size) {
                const Genome &a = tournament(pop), &b = tournament(pop);
                Genome c = a;
                if (rng_.uniform() < 0.9) {
                    if (o_.reorder && n > 1) {
                        int cut = rng_.below(n);
                        for (int i = cut; i < n; i++) c.prio[i] = b.prio[i];
                    }
                    for (int k = 0; k < nc; k++)
                        if (rng_.uniform() < 0.5) c.weight[k] = b.weight[k];
                    double u = rng_.uniform();
                    c.f = u < 1.0 / 3 ? a.f : u < 2.0 / 3 ? b.f : 0.5 * (a.f + b.f);
                    for (size_t k = 0; k < c.host.size(); k++)
                        if (rng_.uniform() < 0.5) c.host[k] = b.host[k];
                    for (size_t k = 0; k < c.drop.size(); k++)
                        if (rng_.uniform() < 0.5) c.drop[k] = b.drop[k];
                }
                mutate(c);
                next.push_back(std::move(c));
            }
            evaluate_all(next, elite);
            out_of_time = timed_out();
            pop = std::move(next);
            const double best_now = std::min_element(pop.begin(), pop.end(), better)->fit;
            if (best_now < mark * (1 - kSwapImprovement) || !std::isfinite(mark)) {
                mark = best_now;
                marked_at = gens + 1;
            }
            patience_out = o_.patience > 0 && gens + 1 - marked_at >= o_.patience;
            if (o_.progress) {
                SwapProgress pr;
                pr.generation = gens + 1;
                pr.generations = o_.generations;
                pr.candidates = candidates_;
                pr.best_time_s = best_now;
                pr.elapsed_s = seconds_since(t0);
                pr.last = gens + 1 >= o_.generations || out_of_time || patience_out;
                o_.progress(pr);
            }
        }
        const Genome &best = *std::min_element(pop.begin(), pop.end(), better);
        Workspace &w = ws_[0];
        decode(best, w);
        // A genome the cache scored still has the bits its repairs cleared
        // (the exact seeds drop nothing, so the best is never infeasible).
        const int all_bits = static_cast<int>(p_.recompute_bufs.size());
        const bool ok = schedule_repairing(w.sched, p_, w.order, p_.classes, w.layout, all_bits, w.schedule, nullptr);
        TESSERA_INTERNAL_ASSERT(ok, "the best candidate's recomputations cannot run");
        SwapPlan plan = make_plan(p_, w.order, p_.classes, w.layout, SwapPolicy::Advisor, w.schedule);
        plan.generations = gens;
        plan.candidates = candidates_;
        plan.stopped_by = patience_out ? "patience" : out_of_time ? "time limit" : "generations";
        return plan;
    }

private:
    const Genome &tournament(const std::vector<Genome> &pop) {
        int best = rng_.below(static_cast<int>(pop.size()));
        for (int k = 0; k < 2; k++) {
            int c = rng_.below(static_cast<int>(pop.size()));
            if (pop[c].fit < pop[best].fit) best = c;
        }
        return pop[best];
    }

    void mutate(Genome &g) {
        int n = static_cast<int>(g.prio.size());
        if (o_.reorder && n > 1 && rng_.uniform() < 0.7) {
            // Move a few operators: each takes the priority of another one,
            // nudged, so that it runs next to it where the dependencies allow.
            int moves = 1 + rng_.below(3);
            for (int m = 0; m < moves; m++) {
                int i = rng_.below(n), j = rng_.below(n);
                g.prio[i] = g.prio[j] + (rng_.uniform() - 0.5) * 1e-3;
            }
        }
        for (double &w : g.weight)
            if (rng_.uniform() < 0.2) w *= std::exp((rng_.uniform() - 0.5) * 2);
        if (rng_.uniform() < 0.3) g.f = std::clamp(g.f + (rng_.uniform() - 0.5) * 0.4, 0.0, 1.0);
        if (host_bits() && !g.host.empty() && rng_.uniform() < 0.3) {
            int flips = 1 + rng_.below(3);
            for (int m = 0; m < flips; m++) g.host[rng_.below(static_cast<int>(g.host.size()))] ^= 1;
        }
        if (!g.drop.empty() && rng_.uniform() < 0.3) {
            int flips = 1 + rng_.below(3);
            for (int m = 0; m < flips; m++) g.drop[rng_.below(static_cast<int>(g.drop.size()))] ^= 1;
        }
    }

    // Seed k's priorities: the given order, perturbed unless exact. In exact
    // seeds 5 and 11 and in seeds 1 and 2 of every four others, each optimizer
    // node runs as soon as its gradient is ready (as ZeRO-Offload overlaps
    // the updates with the backward pass): the given order runs them all
    // last, and the search would otherwise move them one mutation at a time.
    std::vector<double> seed_priorities(int k, bool exact) {
        const int n = static_cast<int>(p_.order.size());
        const bool updates_early = o_.reorder && (exact ? k % 6 == 5 : k % 4 == 1 || k % 4 == 2);
        std::vector<double> prio(n);
        for (int i = 0; i < n; i++) {
            prio[i] = 1.0 - static_cast<double>(i) / n;
            if (!exact && o_.reorder) prio[i] += (rng_.uniform() - 0.5) * (k % 2 ? 0.02 : 0.2);
            if (updates_early && p_.g->node(p_.order[i]).optimizer) prio[i] += 2;
        }
        return prio;
    }

    // Recomputation bits: none in the exact seeds (they are the plans without
    // recomputation); in seeds 2 and 3 of every four others, every activation
    // cheaper to recompute than to bring back over the link (repaired down to
    // what can run), and in seed 0 of four each with probability 1/4.
    std::vector<uint8_t> seed_drop(int k, bool exact) {
        if (!o_.recompute || p_.recompute_bufs.empty()) return {};
        std::vector<uint8_t> bits(p_.recompute_bufs.size(), 0);
        if (!exact && (k % 4 == 2 || k % 4 == 3)) {
            for (size_t i = 0; i < bits.size(); i++) bits[i] = cheaper_to_recompute(p_.recompute_bufs[i]);
        } else if (!exact && k % 4 == 0) {
            for (uint8_t &b : bits) b = rng_.uniform() < 0.25;
        }
        return bits;
    }

    // Whether recomputing buffer b takes its producer less time than
    // bringing it back over the link would.
    bool cheaper_to_recompute(int b) const {
        const Buffer &bf = p_.bufs[b];
        return p_.node_time[bf.producer] < static_cast<double>(bf.raw_bytes) / p_.h2d;
    }

    // Whether the genome's host bits are searched (auto) rather than fixed.
    bool host_bits() const { return o_.host_updates == HostUpdates::Auto && !p_.host_nodes.empty(); }

    // Seed k's host bits: with auto, the first six exact seeds run every
    // update on the host and the next six none; the rest at random.
    std::vector<uint8_t> seed_host(int k) {
        size_t n = p_.host_nodes.size();
        if (o_.host_updates == HostUpdates::Off || n == 0) return {};
        if (o_.host_updates == HostUpdates::All) return std::vector<uint8_t>(n, 1);
        std::vector<uint8_t> bits(n, k < 6 ? 1 : 0);
        if (k >= 12)
            for (uint8_t &b : bits) b = rng_.uniform() < 0.5;
        return bits;
    }

    const Prepared &p_;
    const SwapOptions &o_;
    Rng rng_;
    std::vector<Workspace> ws_;  // per thread (SwapOptions::threads)
    std::vector<int> succ_begin_, succ_;
    std::vector<int> drop_index_;  // per buffer: its index in Prepared::recompute_bufs, or -1
    Clock::time_point t0_;         // when run() started
    int64_t max_pin_ = 0;
    std::unordered_map<uint64_t, double> cache_;
    int64_t candidates_ = 0;
};

}  // namespace

bool schedule_repairing(Scheduler &sched, const Prepared &p, const std::vector<NodeId> &order, const Classes &c,
                        Layout &layout, int max_repairs, Schedule &out, std::vector<int> *cleared) {
    for (int repairs = 0;; repairs++) {
        try {
            sched.run(p, order, c, layout, SwapPolicy::Advisor, out);
            return true;
        } catch (const RecomputeInfeasible &e) {
            if (repairs == max_repairs || e.blame < 0 || !layout.recompute[e.blame]) return false;
            layout.recompute[e.blame] = 0;
            if (cleared) cleared->push_back(e.blame);
        }
    }
}

namespace {

// The baselines' layout: demand-proportional pools, with the best of a few
// pinned fractions, so that they are compared at their best.
SwapPlan plan_baseline(const Prepared &p, SwapPolicy policy) {
    Scheduler sched;
    Schedule s, best_s;
    std::vector<double> end;
    Layout layout, best_layout;
    double best = -1;
    int64_t max_pin = std::max<int64_t>(0, max_pinnable(p, p.classes));
    int64_t candidates = 0;
    for (double f : {0.0, 0.5, 1.0}) {
        choose_pins(p, static_cast<int64_t>(std::floor(f * static_cast<double>(max_pin))), layout);
        split_pools(p, p.classes, demand_weights(p, p.classes, layout.pin), layout);
        sched.run(p, p.order, p.classes, layout, policy, s);
        double t = simulate_schedule(p, s, end);
        candidates++;
        if (best < 0 || t < best) {
            best = t;
            best_layout = layout;
            std::swap(best_s, s);
        }
    }
    SwapPlan plan = make_plan(p, p.order, p.classes, best_layout, policy, best_s);
    plan.candidates = candidates;
    return plan;
}

SwapPlan plan_ideal(Prepared &p) {
    Layout layout;
    layout.pin.assign(p.bufs.size(), -1);
    int64_t at = 0;
    for (size_t b = 0; b < p.bufs.size(); b++) {
        if (!p.bufs[b].persistent) continue;
        layout.pin[b] = at;
        at += p.bufs[b].bytes;
    }
    layout.pinned_bytes = at;
    Classes c = make_classes(p, -1, 0);
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (p.bufs[b].persistent) c.of_buf[b] = -1;
    layout.slots.assign(c.bytes.size(), 0);
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (c.of_buf[b] >= 0) layout.slots[c.of_buf[b]]++;
    Scheduler sched;
    Schedule s;
    sched.run(p, p.order, c, layout, SwapPolicy::Advisor, s);
    TESSERA_INTERNAL_ASSERT(s.swap_in_bytes == 0 && s.swap_out_bytes == 0, "the ideal plan swaps");
    SwapPlan plan = make_plan(p, p.order, c, layout, SwapPolicy::Ideal, s);
    plan.candidates = 1;
    return plan;
}

}  // namespace
}  // namespace swap_detail

SwapPlan plan_swaps(const SwapProblem &problem, const SwapOptions &options) {
    using namespace swap_detail;
    auto t0 = Clock::now();
    if (options.policy == SwapPolicy::Advisor) {
        TESSERA_CHECK(options.population >= 2, "swap options: population must be at least 2, got ",
                      options.population);
        TESSERA_CHECK(options.generations >= 0, "swap options: generations must be non-negative, got ",
                      options.generations);
        TESSERA_CHECK(options.time_limit_s >= 0 && !std::isnan(options.time_limit_s),
                      "swap options: time_limit_s must be non-negative, got ", options.time_limit_s);
        TESSERA_CHECK(options.patience >= 0, "swap options: patience must be non-negative, got ", options.patience);
        TESSERA_CHECK(options.threads >= 1 && options.threads <= 64,
                      "swap options: threads must be between 1 and 64, got ", options.threads);
    }
    Prepared p = prepare(problem, options.policy, true, options.host_updates);
    SwapPlan plan;
    if (options.policy == SwapPolicy::Ideal) {
        plan = plan_ideal(p);
    } else {
        int64_t smallest = 0;
        bool fits = pick_classes(p, &smallest);
        if (!fits && options.policy == SwapPolicy::Advisor && !p.host_nodes.empty()) {
            p.host_fixed = p.host_ok;  // every update on the host: the fewest slots
            fits = pick_classes(p, &smallest);
        }
        if (!fits) {
            NodeId worst = kNoNode;
            int64_t ws = largest_working_set(p, &worst);
            fail("budget ", format_bytes(p.budget), " (", p.budget, " bytes) cannot work: every operator's inputs "
                 "and outputs fit (the largest, operator '", p.g->node(worst).call.name, "', needs ", format_bytes(ws),
                 ", ", ws, " bytes), but memory pools of fixed-size slots that serve every operator do not; the smallest budget "
                 "that can is ", format_bytes(smallest), " (", smallest, " bytes)");
        }
        if (options.policy == SwapPolicy::Advisor) plan = Search(p, options).run();
        else plan = plan_baseline(p, options.policy);
    }
    plan.search_s = seconds_since(t0);
    return plan;
}

int64_t min_swap_budget(const SwapProblem &problem, HostUpdates host) {
    using namespace swap_detail;
    Prepared p = prepare(problem, SwapPolicy::Advisor, false, host);
    int64_t ws = largest_working_set(p, nullptr);
    int64_t pools = 0;
    pick_classes(p, &pools);
    return std::max(ws, pools);
}

}  // namespace tessera
