// The cut solver: the variable-elimination DP against exhaustive search (the
// library's and one written here), against a Viterbi chain DP and closed forms
// for stars and cycles, plus its limits and errors.
#include "tessera/partition/solver.h"

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using test::expect_error;

// The table index of a factor at a full assignment: mixed radix, vars[0] fastest.
int64_t index_in(const Factor &f, const std::vector<int> &domain, const std::vector<int> &a) {
    int64_t idx = 0, stride = 1;
    for (int v : f.vars) {
        idx += stride * a[v];
        stride *= domain[v];
    }
    return idx;
}

int64_t cost_at(const CutProblem &p, const std::vector<int> &a) {
    int64_t sum = 0;
    for (const Factor &f : p.factors) sum += f.table[index_in(f, p.domain, a)];
    return sum;
}

// Exhaustive minimum, first variable fastest (the opposite order of solve_brute).
int64_t own_brute_min(const CutProblem &p) {
    const size_t n = p.domain.size();
    std::vector<int> a(n, 0);
    int64_t best = std::numeric_limits<int64_t>::max();
    while (true) {
        best = std::min(best, cost_at(p, a));
        size_t v = 0;
        while (v < n && ++a[v] == p.domain[v]) a[v++] = 0;
        if (v == n) break;
    }
    return best;
}

CutProblem random_problem(std::mt19937 &rng, bool large_values) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    CutProblem p;
    int n = uniform(1, 8);
    for (int i = 0; i < n; i++) p.domain.push_back(uniform(1, 4));
    int nf = uniform(1, 10);
    for (int f = 0; f < nf; f++) {
        Factor fac;
        std::vector<int> all(n);
        for (int i = 0; i < n; i++) all[i] = i;
        std::shuffle(all.begin(), all.end(), rng);
        int arity = std::min(uniform(0, 3), n);
        fac.vars.assign(all.begin(), all.begin() + arity);
        std::sort(fac.vars.begin(), fac.vars.end());
        int64_t size = 1;
        for (int v : fac.vars) size *= p.domain[v];
        for (int64_t e = 0; e < size; e++) {
            int64_t value = uniform(0, 1000);
            if (large_values && uniform(0, 3) == 0) value = int64_t{1000000000000} + uniform(0, 1000) * int64_t{997};
            fac.table.push_back(value);
        }
        p.factors.push_back(std::move(fac));
    }
    return p;
}

TEST(Solver, RandomProblemsDpMatchesBruteForce) {
    std::mt19937 rng(20240611);
    int with_large = 0, multi_var = 0;
    for (int trial = 0; trial < 300; trial++) {
        bool large = trial % 5 == 4;
        with_large += large;
        CutProblem p = random_problem(rng, large);
        for (const Factor &f : p.factors) multi_var += f.vars.size() >= 2;
        CutSolution dp = solve_dp(p);
        CutSolution brute = solve_brute(p);
        int64_t own = own_brute_min(p);
        SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << p.domain.size() << " variables, "
                                        << p.factors.size() << " factors");
        ASSERT_EQ(dp.choice.size(), p.domain.size());
        for (size_t v = 0; v < p.domain.size(); v++) {
            EXPECT_GE(dp.choice[v], 0);
            EXPECT_LT(dp.choice[v], p.domain[v]);
        }
        EXPECT_EQ(dp.cost, own);
        EXPECT_EQ(brute.cost, own);
        EXPECT_EQ(evaluate(p, dp.choice), dp.cost);
        EXPECT_EQ(cost_at(p, dp.choice), dp.cost);
        EXPECT_EQ(evaluate(p, brute.choice), brute.cost);
    }
    EXPECT_EQ(with_large, 60);
    EXPECT_GT(multi_var, 300);  // the problems do couple variables
}

// The library's own brute force is lexicographic: on ties it keeps the first
// assignment in that order. Two equal minima: (0, 1) and (1, 0).
TEST(Solver, BruteForceTiesKeepTheLexicographicFirst) {
    CutProblem p{{2, 2}, {Factor{{0, 1}, {5, 1, 1, 5}}}};
    CutSolution s = solve_brute(p);
    EXPECT_EQ(s.cost, 1);
    EXPECT_EQ(s.choice, (std::vector<int>{0, 1}));
}

// A chain x0 - x1 - ... - x199 with unary and pairwise costs against Viterbi.
TEST(Solver, LongChainMatchesViterbi) {
    const int n = 200, d = 3;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int64_t> val(0, 1000);
    CutProblem p;
    p.domain.assign(n, d);
    std::vector<std::vector<int64_t>> unary(n, std::vector<int64_t>(d));
    std::vector<std::vector<int64_t>> pair(n - 1, std::vector<int64_t>(d * d));  // pair[i][a + d * b]
    for (int i = 0; i < n; i++) {
        for (int64_t &u : unary[i]) u = val(rng);
        p.factors.push_back(Factor{{i}, unary[i]});
    }
    for (int i = 0; i + 1 < n; i++) {
        for (int64_t &c : pair[i]) c = val(rng);
        p.factors.push_back(Factor{{i, i + 1}, pair[i]});
    }
    // Viterbi, left to right.
    std::vector<int64_t> best(unary[0]);
    for (int i = 1; i < n; i++) {
        std::vector<int64_t> next(d, std::numeric_limits<int64_t>::max());
        for (int b = 0; b < d; b++)
            for (int a = 0; a < d; a++) next[b] = std::min(next[b], best[a] + pair[i - 1][a + d * b] + unary[i][b]);
        best = next;
    }
    int64_t viterbi = *std::min_element(best.begin(), best.end());

    EXPECT_EQ(assignment_count(p), std::numeric_limits<int64_t>::max());  // 3^200: no brute force
    CutSolution dp = solve_dp(p);
    EXPECT_EQ(dp.cost, viterbi);
    EXPECT_EQ(cost_at(p, dp.choice), viterbi);
    // A chain needs only pairwise tables.
    EXPECT_NO_THROW(solve_dp(p, d * d));
}

// A star: the centre has domain 4, twelve leaves of domain 3. Given the centre,
// each leaf picks its own best, so the minimum is a one-line formula.
TEST(Solver, StarMatchesClosedForm) {
    const int leaves = 12;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int64_t> val(0, 1000);
    CutProblem p;
    p.domain.push_back(4);
    for (int l = 0; l < leaves; l++) p.domain.push_back(3);
    std::vector<int64_t> centre(4);
    for (int64_t &c : centre) c = val(rng);
    p.factors.push_back(Factor{{0}, centre});
    std::vector<std::vector<int64_t>> edge(leaves, std::vector<int64_t>(12));  // c + 4 * leaf
    for (int l = 0; l < leaves; l++) {
        for (int64_t &e : edge[l]) e = val(rng);
        p.factors.push_back(Factor{{0, l + 1}, edge[l]});
    }
    int64_t expected = std::numeric_limits<int64_t>::max();
    for (int c = 0; c < 4; c++) {
        int64_t sum = centre[c];
        for (int l = 0; l < leaves; l++) {
            int64_t m = std::numeric_limits<int64_t>::max();
            for (int x = 0; x < 3; x++) m = std::min(m, edge[l][c + 4 * x]);
            sum += m;
        }
        expected = std::min(expected, sum);
    }
    CutSolution dp = solve_dp(p);
    EXPECT_EQ(dp.cost, expected);
    EXPECT_EQ(evaluate(p, dp.choice), expected);
    // Eliminating leaves first keeps every table at 4 x 3 entries.
    EXPECT_NO_THROW(solve_dp(p, 12));
}

// A cycle of ten variables: fix x0, run a chain DP around the ring, close it.
TEST(Solver, CycleMatchesFixedStartChain) {
    const int n = 10, d = 3;
    std::mt19937 rng(13);
    std::uniform_int_distribution<int64_t> val(0, 1000);
    CutProblem p;
    p.domain.assign(n, d);
    // edge[i] couples x_i and x_{(i+1) % n}, indexed [x_i][x_next].
    std::vector<std::vector<std::vector<int64_t>>> edge(n, std::vector<std::vector<int64_t>>(d, std::vector<int64_t>(d)));
    for (int i = 0; i < n; i++) {
        for (auto &row : edge[i])
            for (int64_t &e : row) e = val(rng);
        int j = (i + 1) % n;
        Factor f;
        f.vars = {std::min(i, j), std::max(i, j)};
        for (int b = 0; b < d; b++)  // vars[0] fastest
            for (int a = 0; a < d; a++) f.table.push_back(i < j ? edge[i][a][b] : edge[i][b][a]);
        p.factors.push_back(f);
    }
    int64_t expected = std::numeric_limits<int64_t>::max();
    for (int x0 = 0; x0 < d; x0++) {
        std::vector<int64_t> best(d, std::numeric_limits<int64_t>::max() / 2);
        best[x0] = 0;
        for (int i = 0; i + 1 < n; i++) {
            std::vector<int64_t> next(d, std::numeric_limits<int64_t>::max() / 2);
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) next[b] = std::min(next[b], best[a] + edge[i][a][b]);
            best = next;
        }
        for (int last = 0; last < d; last++) expected = std::min(expected, best[last] + edge[n - 1][last][x0]);
    }
    CutSolution dp = solve_dp(p);
    EXPECT_EQ(dp.cost, expected);
    EXPECT_EQ(evaluate(p, dp.choice), expected);
    EXPECT_EQ(solve_brute(p).cost, expected);
    EXPECT_EQ(own_brute_min(p), expected);
}

// Variables no factor mentions, factors over no variables, and domain-1 variables.
TEST(Solver, DegenerateFactorsAndVariables) {
    CutProblem p{{3, 1, 2}, {Factor{{}, {40}}, Factor{{}, {2}}, Factor{{2}, {9, 4}}, Factor{{1, 2}, {6, 1}}}};
    CutSolution dp = solve_dp(p);
    EXPECT_EQ(dp.cost, 40 + 2 + 4 + 1);
    EXPECT_EQ(dp.choice[1], 0);
    EXPECT_EQ(dp.choice[2], 1);
    EXPECT_GE(dp.choice[0], 0);
    EXPECT_LT(dp.choice[0], 3);
    EXPECT_EQ(solve_brute(p).cost, dp.cost);
}

TEST(Solver, EmptyProblemCostsNothing) {
    CutProblem p;
    CutSolution dp = solve_dp(p);
    EXPECT_EQ(dp.cost, 0);
    EXPECT_TRUE(dp.choice.empty());
    CutSolution brute = solve_brute(p);
    EXPECT_EQ(brute.cost, 0);
    EXPECT_TRUE(brute.choice.empty());
    EXPECT_EQ(assignment_count(p), 1);
    EXPECT_EQ(evaluate(p, {}), 0);
}

TEST(Solver, Deterministic) {
    // Many ties: every table entry is 0 or 1.
    std::mt19937 rng(99);
    CutProblem p;
    p.domain.assign(12, 3);
    for (int i = 0; i + 2 < 12; i++) {
        Factor f{{i, i + 1, i + 2}, {}};
        for (int e = 0; e < 27; e++) f.table.push_back(static_cast<int64_t>(rng() % 2));
        p.factors.push_back(f);
    }
    CutSolution a = solve_dp(p), b = solve_dp(p);
    EXPECT_EQ(a.choice, b.choice);
    EXPECT_EQ(a.cost, b.cost);
    CutProblem copy = p;
    EXPECT_EQ(solve_dp(copy).choice, a.choice);
    EXPECT_EQ(solve_brute(p).choice, solve_brute(copy).choice);
    EXPECT_EQ(a.cost, own_brute_min(p));
}

TEST(Solver, BruteLimitError) {
    CutProblem p;
    p.domain.assign(10, 4);  // 4^10 = 1048576 assignments
    expect_error([&] { solve_brute(p, 1000); },
                 "brute force would try 1048576 layout assignments, more than the limit of 1000");
    expect_error([&] { solve_brute(p, 1000); }, "--strategy tofu");
    EXPECT_NO_THROW(solve_brute(p, 1048576));  // exactly at the limit is allowed
}

TEST(Solver, DpTableLimitError) {
    // One factor over four variables of domain 4: eliminating any of them needs 256 entries.
    CutProblem p;
    p.domain.assign(4, 4);
    Factor f{{0, 1, 2, 3}, std::vector<int64_t>(256)};
    for (int e = 0; e < 256; e++) f.table[e] = (e * 37) % 101;
    p.factors.push_back(f);
    expect_error([&] { solve_dp(p, 100); }, "too wide");
    expect_error([&] { solve_dp(p, 100); }, "needs a table of 256 entries");
    CutSolution s = solve_dp(p, 256);
    EXPECT_EQ(s.cost, 0);  // e = 0 gives 0
}

TEST(Solver, AssignmentCountSaturates) {
    EXPECT_EQ(assignment_count(CutProblem{{2, 3, 4}, {}}), 24);
    EXPECT_EQ(assignment_count(CutProblem{{1 << 30, 1 << 30}, {}}), int64_t{1} << 60);
    EXPECT_EQ(assignment_count(CutProblem{{1 << 30, 1 << 30, 8}, {}}), std::numeric_limits<int64_t>::max());
    EXPECT_EQ(assignment_count(CutProblem{{1 << 30, 1 << 30, 8, 8, 1 << 30}, {}}),
              std::numeric_limits<int64_t>::max());
    CutProblem huge;
    huge.domain.assign(100, 4);
    EXPECT_EQ(assignment_count(huge), std::numeric_limits<int64_t>::max());
    expect_error([&] { solve_brute(huge); }, "brute force would try over 9.2e18 layout assignments");
}

}  // namespace
}  // namespace tessera
