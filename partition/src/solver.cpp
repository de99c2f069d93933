// Variable elimination for min-sum problems. Eliminating a variable v replaces
// every factor that mentions v by one factor over their other variables:
//   m(rest) = min over v of the sum of those factors.
// The combined table is kept, so that once every variable is gone the argmin is
// recovered in reverse order, each variable choosing its best value given the
// later ones. The order is greedy: the variable whose combined table is smallest,
// ties to the lowest id, which on a chain of operators is Tofu's left-to-right DP.
#include "tessera/partition/solver.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

int64_t saturating_mul(int64_t a, int64_t b) {
    if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::numeric_limits<int64_t>::max();
    return a * b;
}

// Index of `assignment` (over all variables) in a factor's table.
int64_t table_index(const Factor &f, const std::vector<int> &domain, const std::vector<int> &assignment) {
    int64_t idx = 0, stride = 1;
    for (int v : f.vars) {
        idx += stride * assignment[v];
        stride *= domain[v];
    }
    return idx;
}

struct Eliminated {
    int var;
    Factor combined;  // over var and its neighbours at elimination time
};

}  // namespace

int64_t assignment_count(const CutProblem &p) {
    int64_t n = 1;
    for (int d : p.domain) n = saturating_mul(n, d);
    return n;
}

int64_t evaluate(const CutProblem &p, const std::vector<int> &choice) {
    TESSERA_INTERNAL_ASSERT(choice.size() == p.domain.size());
    int64_t sum = 0;
    for (const Factor &f : p.factors) sum += f.table[table_index(f, p.domain, choice)];
    return sum;
}

CutSolution solve_brute(const CutProblem &p, int64_t limit) {
    int64_t count = assignment_count(p);
    const bool saturated = count == std::numeric_limits<int64_t>::max();
    TESSERA_CHECK(count <= limit, "brute force would try ", saturated ? "over 9.2e18" : std::to_string(count),
                  " layout assignments, more than the limit of ", limit,
                  "; use the DP (--strategy tofu) for a graph this size");
    const int n = static_cast<int>(p.domain.size());
    std::vector<int> a(n, 0);
    CutSolution best{a, kInf};
    for (int64_t i = 0; i < count; i++) {
        int64_t c = evaluate(p, a);
        if (c < best.cost) best = {a, c};
        for (int v = n - 1; v >= 0; v--) {  // odometer, last variable fastest: lexicographic order
            if (++a[v] < p.domain[v]) break;
            a[v] = 0;
        }
    }
    return best;
}

namespace {

// Calls fn(e) for every entry e of a table over `scope`, with `assignment`
// holding the scope's values (an odometer, scope[0] fastest).
template<typename Fn>
void each_entry(const std::vector<int> &scope, const std::vector<int> &domain, std::vector<int> &assignment, Fn &&fn) {
    int64_t size = 1;
    for (int u : scope) size = saturating_mul(size, domain[u]);
    std::vector<int> idx(scope.size(), 0);
    for (int64_t e = 0; e < size; e++) {
        for (size_t s = 0; s < scope.size(); s++) assignment[scope[s]] = idx[s];
        fn(e);
        for (size_t s = 0; s < scope.size(); s++) {
            if (++idx[s] < domain[scope[s]]) break;
            idx[s] = 0;
        }
    }
}

// The sum of `involved` factors over `scope` (a table of `size` entries).
Factor sum_factors(const std::vector<int> &scope, int64_t size, const std::vector<int> &involved,
                   const std::vector<Factor> &factors, const std::vector<int> &domain, std::vector<int> &assignment) {
    Factor combined{scope, std::vector<int64_t>(static_cast<size_t>(size), 0)};
    each_entry(scope, domain, assignment, [&](int64_t e) {
        int64_t sum = 0;
        for (int fi : involved) sum += factors[fi].table[table_index(factors[fi], domain, assignment)];
        combined.table[e] = sum;
    });
    return combined;
}

// `combined` minimised over variable v.
Factor minimise_out(const Factor &combined, int v, const std::vector<int> &domain, std::vector<int> &assignment) {
    Factor reduced;
    int64_t rsize = 1;
    for (int u : combined.vars)
        if (u != v) reduced.vars.push_back(u), rsize = saturating_mul(rsize, domain[u]);
    reduced.table.assign(static_cast<size_t>(rsize), kInf);
    each_entry(combined.vars, domain, assignment, [&](int64_t e) {
        int64_t r = table_index(reduced, domain, assignment);
        reduced.table[r] = std::min(reduced.table[r], combined.table[e]);
    });
    return reduced;
}

// Back-substitution: later-eliminated variables are fixed first.
std::vector<int> back_substitute(const std::vector<Eliminated> &trail, const std::vector<int> &domain) {
    std::vector<int> choice(domain.size(), 0);
    for (auto it = trail.rbegin(); it != trail.rend(); ++it) {
        const Factor &c = it->combined;
        int best = 0;
        int64_t best_cost = kInf;
        for (int x = 0; x < domain[it->var]; x++) {
            choice[it->var] = x;
            int64_t cost = c.table[table_index(c, domain, choice)];
            if (cost < best_cost) {
                best_cost = cost;
                best = x;
            }
        }
        choice[it->var] = best;
    }
    return choice;
}

}  // namespace

CutSolution solve_dp(const CutProblem &p, int64_t max_table) {
    const int n = static_cast<int>(p.domain.size());
    std::vector<Factor> factors;
    int64_t constant = 0;
    for (const Factor &f : p.factors) {
        if (f.vars.empty()) constant += f.table.at(0);
        else factors.push_back(f);
    }
    // Which live factors mention each variable.
    std::vector<std::set<int>> mentions(n);
    for (size_t i = 0; i < factors.size(); i++)
        for (int v : factors[i].vars) mentions[v].insert(static_cast<int>(i));
    std::vector<bool> done(n, false);
    auto scope_of = [&](int v) {
        std::set<int> s{v};
        for (int fi : mentions[v])
            for (int u : factors[fi].vars) s.insert(u);
        return std::vector<int>(s.begin(), s.end());
    };
    auto table_size = [&](const std::vector<int> &scope) {
        int64_t t = 1;
        for (int u : scope) t = saturating_mul(t, p.domain[u]);
        return t;
    };
    // Candidates ordered by (table size, id); sizes change only for neighbours
    // of an eliminated variable, which are re-keyed.
    std::set<std::pair<int64_t, int>> queue;
    std::vector<int64_t> key(n);
    for (int v = 0; v < n; v++) queue.insert({key[v] = table_size(scope_of(v)), v});
    std::vector<Eliminated> trail;
    trail.reserve(n);
    std::vector<int> assignment(n, 0);
    while (!queue.empty()) {
        auto [size, v] = *queue.begin();
        queue.erase(queue.begin());
        std::vector<int> scope = scope_of(v);
        TESSERA_CHECK(size <= max_table, "the partition DP needs a table of ", size,
                      " entries to eliminate one tensor group (more than ", max_table,
                      "): the graph's frontier of live tensors is too wide for an exact search");
        std::vector<int> involved(mentions[v].begin(), mentions[v].end());
        Factor combined = sum_factors(scope, size, involved, factors, p.domain, assignment);
        Factor reduced = minimise_out(combined, v, p.domain, assignment);
        for (int fi : involved)
            for (int u : factors[fi].vars) mentions[u].erase(fi);
        done[v] = true;
        trail.push_back({v, std::move(combined)});
        if (reduced.vars.empty()) {
            constant += reduced.table[0];
        } else {
            factors.push_back(std::move(reduced));
            for (int u : factors.back().vars) mentions[u].insert(static_cast<int>(factors.size() - 1));
        }
        for (int u : scope) {
            if (u == v || done[u]) continue;
            queue.erase({key[u], u});
            queue.insert({key[u] = table_size(scope_of(u)), u});
        }
    }
    std::vector<int> choice = back_substitute(trail, p.domain);
    TESSERA_INTERNAL_ASSERT(evaluate(p, choice) == constant, "DP backtracking gives ", evaluate(p, choice),
                            ", the recurrence ", constant);
    return CutSolution{choice, constant};
}

}  // namespace tessera
