// The exact search of one cut, as a plain minimisation problem: variables with
// small finite domains (a tensor group's layouts) and factors (an operator's
// communication cost for every combination of the layouts it touches). The cost
// of an assignment is the sum of its factors.
//
// solve_dp() is Tofu's dynamic program in its general form: variable elimination.
// Tofu walks a chain of operators keeping, as DP state, the layouts of the
// tensors still live; eliminating variables in an order that keeps that frontier
// small is the same recurrence, and it stays exact on graphs that are not chains
// (residual blocks, LSTM cells). solve_brute() enumerates every assignment: the
// oracle for tests and `--strategy brute`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tessera {

struct Factor {
    std::vector<int> vars;        // distinct variable ids, ascending
    std::vector<int64_t> table;   // mixed radix over vars, vars[0] fastest
};

struct CutProblem {
    std::vector<int> domain;      // domain size of each variable, >= 1
    std::vector<Factor> factors;
};

struct CutSolution {
    std::vector<int> choice;      // per variable, an index into its domain
    int64_t cost = 0;
};

// Sum of the factors at an assignment.
int64_t evaluate(const CutProblem &p, const std::vector<int> &choice);

// The minimum and an assignment reaching it; ties go the same way every run.
// Throws tessera::Error if some intermediate table would exceed `max_table`
// entries (a graph whose frontier is too wide).
CutSolution solve_dp(const CutProblem &p, int64_t max_table = int64_t{1} << 24);

// Every assignment, in lexicographic order; throws tessera::Error naming the
// count when there are more than `limit`.
CutSolution solve_brute(const CutProblem &p, int64_t limit = int64_t{1} << 24);

// Number of assignments, saturating at INT64_MAX.
int64_t assignment_count(const CutProblem &p);

using CutSolver = std::function<CutSolution(const CutProblem &)>;

}  // namespace tessera
