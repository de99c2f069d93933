// A gradient check of every model in the zoo, at small sizes, against finite
// differences of the loss.
//
// For each model, gradients of the loss with respect to every parameter come
// from append_backward (no optimizer) run by the plain reference evaluator.
// Then, for each parameter tensor p with values theta and scale s:
//   * a directional derivative D = <grad_p, d> is compared with the central
//     difference (L(theta + eps d) - L(theta - eps d)) / 2 eps. The direction
//     d = s (z + grad_p / rms(grad_p)) mixes a random z with the gradient, so D is
//     far from zero whatever the gradient is, while a gradient wrong in scale,
//     sign or any component changes the comparison;
//   * so is each of a few single entries: the largest and up to two random ones
//     among those large enough to resolve;
//   * every tensor must get a non-zero gradient, except those whose gradient is
//     zero in exact arithmetic (the attention key bias), which must get (nearly)
//     zero, with a loss that does not move along it.
//
// Kernels run in f32 and the networks have ReLU and max-pool kinks, so:
//   * the step eps (a fraction of s) is tried from large to small, and used only
//     while the loss's rounding noise / eps stays below 2% of D: curvature and
//     crossed kinks shrink with eps, rounding grows. The comparison allows 2%
//     beyond that rounding, so no accepted difference is more than 4% off;
//   * where no step agrees, the difference is compared with the trapezoid
//     integral of the analytic derivative over the same interval, which is exact
//     for any piecewise-smooth loss up to the quadrature (L(+) - L(-) is the
//     integral of D), so kinks inside the interval do not matter;
//   * networks with ReLU and batch norm stay rough even so (see kRough): for them
//     90% of the comparisons must agree, for the smooth ones all of them.
// Replacing any backward rule these models use by a wrong one (a different
// operator, or the right one times 1.05) fails at least one of these tests.
#include <cmath>
#include <limits>
#include <functional>
#include <random>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/exec/reference.h"
#include "tessera/graph/autodiff.h"
#include "tessera/models/zoo.h"

namespace tessera {
namespace {

// The spread of a parameter's values, from its initialiser; at least 0.2 so that
// biases, norms' gammas and betas and small embeddings move off their defaults.
double param_scale(const Init &init) {
    switch (init.kind) {
    case Init::Kind::HeNormal: return std::sqrt(2.0 / init.fan_in);
    case Init::Kind::XavierUniform: return std::sqrt(2.0 / (init.fan_in + init.fan_out));
    case Init::Kind::Normal: return std::max(init.value, 0.2);
    case Init::Kind::Uniform: return std::max(init.value, 0.2);
    default: return 0.3;
    }
}

struct Problem {
    Model model;    // with the backward nodes
    Graph forward;  // the same graph without them, for the finite differences
    std::vector<TensorId> params, grads;
    std::map<TensorId, HostBuffer> values;
    std::map<TensorId, double> scale;
};

// Lets a case move a parameter's values: (name, center, scale) in, adjusted.
using Adjust = std::function<void(const std::string &name, double &center, double &scale)>;

Problem make_problem(const std::string &spec, int64_t batch, uint32_t seed, const Adjust &adjust = {}) {
    Problem p{build_model(spec, batch), {}, {}, {}, {}, {}};
    p.forward = p.model.graph;
    Graph &g = p.model.graph;
    p.params = g.with_role(TensorRole::Param);
    p.grads = append_backward(g, p.model.loss, p.params);
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.producer != kNoNode) continue;
        const int64_t n = info.type.elements();
        if (info.type.dtype == DType::I32) {
            std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(p.model.num_classes - 1));
            std::vector<int32_t> v(n);
            for (int32_t &x : v) x = pick(rng);
            p.values[t] = to_buffer(v);
            continue;
        }
        std::vector<float> v(n, 0.0f);
        switch (info.role) {
        case TensorRole::Param: {
            double s = param_scale(info.init);
            double center = info.init.kind == Init::Kind::Constant ? info.init.value : 0.0;
            if (adjust) adjust(info.name, center, s);
            for (float &x : v) x = static_cast<float>(center + s * normal(rng));
            p.scale[t] = s;
            break;
        }
        case TensorRole::Constant:
            if (info.init.kind == Init::Kind::Constant) std::fill(v.begin(), v.end(), float(info.init.value));
            if (info.init.kind == Init::Kind::CausalMask) {
                const int64_t T = info.type.shape.back();
                for (int64_t k = 0; k < n; k++)
                    if (k % T > (k / T) % T) v[k] = float(info.init.value);
            }
            break;
        default:
            for (float &x : v) x = static_cast<float>(normal(rng));
        }
        p.values[t] = to_buffer(v);
    }
    return p;
}

double loss_of(const Problem &p, const std::map<TensorId, HostBuffer> &values) {
    return from_buffer<float>(evaluate_reference(p.forward, values)[p.model.loss])[0];
}

// The loss with parameter `t` replaced by theta + step * dir.
double loss_moved(const Problem &p, TensorId t, const std::vector<float> &theta, const std::vector<double> &dir,
                  double step) {
    std::vector<float> moved(theta.size());
    for (size_t k = 0; k < theta.size(); k++) moved[k] = static_cast<float>(theta[k] + step * dir[k]);
    auto values = p.values;
    values[t] = to_buffer(moved);
    return loss_of(p, values);
}

struct Case {
    Case(std::string spec, int64_t batch, Adjust adjust = {}, std::string zero_gradient = {},
         double min_passing = 1.0, int entries = 3)
        : spec(std::move(spec)), batch(batch), adjust(std::move(adjust)), zero_gradient(std::move(zero_gradient)),
          min_passing(min_passing), entries(entries) {}
    std::string spec;
    int64_t batch;
    Adjust adjust;
    // Parameters whose gradient is zero in exact arithmetic (names matching this).
    std::string zero_gradient;
    // The fraction of comparisons that must pass: 1 (all) except for networks
    // too rough at a random point for every difference to converge (see below).
    double min_passing;
    int entries;  // single entries checked per tensor: the largest, then random ones
};

constexpr double kRtol = 2e-2;   // relative error allowed beyond rounding noise
constexpr double kNoise = 1e-6;  // rounding noise of an f32 loss evaluation (about 8 ulp), relative
constexpr double kSteps[] = {1e-1, 1e-2, 1e-3, 1e-4, 3e-5, 1e-5};
constexpr double kPathSteps[] = {1e-3, 1e-2};
constexpr int kPathPoints = 9;
// Single entries move one weight, which crosses kinks like a whole tensor's
// move; they start at this step.
constexpr double kEntryStep = 1e-2;

// Whether a derivative of this size can be told apart from rounding at `eps`.
bool resolvable(double derivative, double noise, double eps) { return noise / eps <= kRtol * std::abs(derivative); }

struct Comparison {
    double fd = 0, step = 0;
    double err = std::numeric_limits<double>::infinity();  // beyond rounding, relative to |analytic|
    double raw = 0;                                         // |fd - reference| / |analytic|, for the report
    bool path = false;                                      // compared with the path integral
};

// The derivative of parameter `i` along `dir` (values of every other input as in
// p.values), from the full graph with its backward nodes.
double analytic_at(const Problem &p, size_t i, const std::vector<float> &theta, const std::vector<double> &dir,
                   double step) {
    std::vector<float> moved(theta.size());
    for (size_t k = 0; k < theta.size(); k++) moved[k] = static_cast<float>(theta[k] + step * dir[k]);
    auto values = p.values;
    values[p.params[i]] = to_buffer(moved);
    std::vector<float> g = from_buffer<float>(evaluate_reference(p.model.graph, values)[p.grads[i]]);
    double d = 0;
    for (size_t k = 0; k < g.size(); k++) d += g[k] * dir[k];
    return d;
}

// Compares `analytic` (the derivative of parameter i along dir at theta) with
// central differences, then with path integrals where those disagree.
Comparison compare(const Problem &p, size_t i, const std::vector<float> &theta, const std::vector<double> &dir,
                   double analytic, double noise, double max_step) {
    const TensorId t = p.params[i];
    Comparison best;
    auto consider = [&](double fd, double reference, double eps, bool path) {
        double err = std::max(0.0, std::abs(fd - reference) - noise / eps) / std::abs(analytic);
        if (err < best.err) best = {fd, eps, err, std::abs(fd - reference) / std::abs(analytic), path};
    };
    for (double eps : kSteps) {
        if (eps > max_step) continue;
        if (!resolvable(analytic, noise, eps)) break;
        double fd = (loss_moved(p, t, theta, dir, eps) - loss_moved(p, t, theta, dir, -eps)) / (2 * eps);
        consider(fd, analytic, eps, false);
        if (best.err < kRtol) return best;
    }
    for (double eps : kPathSteps) {
        if (!resolvable(analytic, noise, eps)) continue;
        double fd = (loss_moved(p, t, theta, dir, eps) - loss_moved(p, t, theta, dir, -eps)) / (2 * eps);
        double sum = 0;
        for (int k = 0; k < kPathPoints; k++) {
            double tk = eps * (2.0 * k / (kPathPoints - 1) - 1);
            double d = k == kPathPoints / 2 ? analytic : analytic_at(p, i, theta, dir, tk);
            sum += (k == 0 || k == kPathPoints - 1 ? 0.5 : 1.0) * d;
        }
        consider(fd, sum / (kPathPoints - 1), eps, true);
        if (best.err < kRtol) return best;
    }
    return best;
}

std::string describe(const Comparison &c) {
    std::ostringstream os;
    os << "finite difference " << c.fd << " (step " << c.step << (c.path ? ", against the path integral" : "")
       << ")";
    return os.str();
}

// A parameter whose gradient must vanish: both the gradient (`scaled_rms`,
// its RMS times the parameter's scale) and the loss's response along a random
// direction.
void expect_zero_gradient(const Problem &p, TensorId t, const std::vector<float> &theta, double scaled_rms,
                          double noise, double s, std::normal_distribution<double> &normal, std::mt19937 &rng) {
    const std::string &name = p.model.graph.tensor(t).name;
    EXPECT_LT(scaled_rms, 1e-6) << name << " should have a zero gradient";
    std::vector<double> dir(theta.size());
    for (double &d : dir) d = s * normal(rng);
    double fd = (loss_moved(p, t, theta, dir, 1e-2) - loss_moved(p, t, theta, dir, -1e-2)) / 2e-2;
    EXPECT_LT(std::abs(fd), noise / 1e-2) << name << ": the loss moves along a zero gradient";
}

// Single entries to check: the largest, and up to count - 1 random ones among
// those that are at least a tenth of it and resolvable.
std::vector<size_t> entries_to_check(const std::vector<float> &grad, size_t largest, double s, double noise,
                                     int count, std::mt19937 &rng) {
    std::vector<size_t> candidates;
    for (size_t k = 0; k < grad.size(); k++)
        if (k != largest && std::abs(grad[k]) >= 0.1 * std::abs(grad[largest]) &&
            resolvable(grad[k] * s, noise, kEntryStep))
            candidates.push_back(k);
    std::vector<size_t> entries;
    if (resolvable(grad[largest] * s, noise, kEntryStep)) entries.push_back(largest);
    for (int r = 1; r < count && !candidates.empty(); r++) {
        size_t pick = std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng);
        entries.push_back(candidates[pick]);
        candidates.erase(candidates.begin() + pick);
    }
    return entries;
}

// Every comparison within tolerance, or (min_passing < 1) at least that
// share of them, the others listed.
void expect_passing(const std::vector<std::string> &failures, int comparisons, double min_passing) {
    const double passing = 1.0 - double(failures.size()) / comparisons;
    if (min_passing >= 1.0) {
        for (const std::string &f : failures) ADD_FAILURE() << f;
    } else {
        EXPECT_GE(passing, min_passing) << failures.size() << " of " << comparisons << " comparisons are off";
        for (const std::string &f : failures) std::printf("    off: %s\n", f.c_str());
    }
}

void check_model(const Case &c) {
    SCOPED_TRACE(c.spec);
    Problem p = make_problem(c.spec, c.batch, 1234, c.adjust);
    const Graph &g = p.model.graph;
    auto base = evaluate_reference(g, p.values);
    const double loss = from_buffer<float>(base[p.model.loss])[0];
    ASSERT_TRUE(std::isfinite(loss));
    const double noise = kNoise * std::max(1.0, std::abs(loss));
    std::mt19937 rng(99);
    std::normal_distribution<double> normal(0.0, 1.0);
    ASSERT_FALSE(p.params.empty());
    double worst_dir = 0, worst_entry = 0;
    int zero = 0, entries_checked = 0, path_integrals = 0, comparisons = 0;
    std::vector<std::string> failures;
    auto expect_close = [&](const Comparison &r, const std::string &what) {
        comparisons++;
        path_integrals += r.path;
        if (!(r.err < kRtol)) failures.push_back(what + ", " + describe(r));
    };
    for (size_t i = 0; i < p.params.size(); i++) {
        const TensorId t = p.params[i];
        const std::string &name = g.tensor(t).name;
        ASSERT_NE(p.grads[i], kNoTensor) << name << " gets no gradient";
        const std::vector<float> grad = from_buffer<float>(base[p.grads[i]]);
        const std::vector<float> theta = from_buffer<float>(p.values.at(t));
        ASSERT_EQ(grad.size(), theta.size()) << name;
        const double s = p.scale.at(t);
        double sq = 0;
        for (float x : grad) sq += double(x) * x;
        const double rms = std::sqrt(sq / grad.size());

        if (!c.zero_gradient.empty() && std::regex_search(name, std::regex(c.zero_gradient))) {
            zero++;
            expect_zero_gradient(p, t, theta, rms * s, noise, s, normal, rng);
            continue;
        }
        if (!(rms > 0)) {
            ADD_FAILURE() << name << ": its gradient is zero";
            continue;
        }

        // Directional derivative.
        std::vector<double> dir(grad.size());
        double analytic = 0;
        for (size_t k = 0; k < grad.size(); k++) {
            dir[k] = s * (normal(rng) + grad[k] / rms);
            analytic += grad[k] * dir[k];
        }
        // Every other parameter moves the loss: a gradient far from the rounding
        // of a true zero (about 1e-9 here, see the key bias).
        if (!(std::abs(analytic) > 1e-6)) {
            ADD_FAILURE() << name << ": its gradient is (nearly) zero: directional derivative " << analytic;
            continue;
        }
        if (!resolvable(analytic, noise, kSteps[0])) {
            comparisons++;
            std::ostringstream what;
            what << name << ": directional derivative " << analytic << " is too small to resolve against rounding "
                 << noise / kSteps[0] << " at the largest step";
            failures.push_back(what.str());
            continue;
        }
        Comparison d = compare(p, i, theta, dir, analytic, noise, kSteps[0]);
        worst_dir = std::max(worst_dir, d.raw);
        std::ostringstream what;
        what << name << ": directional derivative " << analytic;
        expect_close(d, what.str());

        size_t largest = 0;
        for (size_t k = 1; k < grad.size(); k++)
            if (std::abs(grad[k]) > std::abs(grad[largest])) largest = k;
        for (size_t k : entries_to_check(grad, largest, s, noise, c.entries, rng)) {
            std::vector<double> unit(grad.size(), 0.0);
            unit[k] = s;
            Comparison e = compare(p, i, theta, unit, grad[k] * s, noise, kEntryStep);
            if (k == largest) worst_entry = std::max(worst_entry, e.raw);
            entries_checked++;
            std::ostringstream entry;
            entry << name << "[" << k << "]: autodiff " << grad[k] << " (times the scale " << s << ")";
            expect_close(e, entry.str());
        }
    }
    if (!c.zero_gradient.empty()) {
        EXPECT_GT(zero, 0) << "no parameter matches " << c.zero_gradient;
    }
    std::printf("  %-64s loss %.3f, %3zu tensors, %3d entries, %3d by path integral, %zu of %d off; worst "
                "relative error %.1e (directions), %.1e (largest entries)\n",
                c.spec.c_str(), loss, p.params.size(), entries_checked, path_integrals, failures.size(), comparisons,
                worst_dir, worst_entry);
    expect_passing(failures, comparisons, c.min_passing);
}

// Values near a well-conditioned point of a residual network: the last batch
// norm of each residual branch gets a small gamma (as in "zero-init residual"
// training), so that a random 18- or 50-layer network is not chaotic and finite
// differences converge.
void small_residual_gamma(const std::string &name, double &center, double &scale) {
    static const std::regex last_norm(R"(block\d+\.conv[23]\.gamma$)");
    if (std::regex_search(name, last_norm)) {
        center = 0.2;
        scale = 0.1;
    }
}

// Embeddings of unit scale, so that the LSTM's state is large enough for its
// recurrent weights to matter.
void unit_embedding(const std::string &name, double &, double &scale) {
    if (name == "embed") scale = 1.0;
}

// ReLU and batch-norm networks at a random point are rough: the derivative can
// change by tens of percent within the smallest step that f32 can resolve (a
// unit crossing zero, a max-pool switching its maximum, amplified through the
// layers; in a tiny MLP one crossing is a quarter of a weight's gradient). A
// few comparisons of such a network may then disagree however correct its
// gradient; an operator with a wrong rule spoils most of them.
constexpr double kRough = 0.9;

TEST(GradCheck, Mlp) { check_model({"mlp:layers=3,hidden=8,input=6,classes=5", 4, {}, {}, kRough}); }

TEST(GradCheck, Cnn) {
    check_model({"cnn:convs=2,channels=3,kernel=3,hidden=8,classes=5", 3, {}, {}, kRough});
    check_model({"cnn:convs=1,channels=2,kernel=5,hidden=0,classes=4", 2, {}, {}, kRough});
}

TEST(GradCheck, WresnetBasicBlocks) {
    check_model({"wresnet:depth=18,width=1,image=8,base=4,channels=2,classes=5", 4, small_residual_gamma, {}, kRough});
}

TEST(GradCheck, WresnetBottleneckWidened) {
    check_model({"wresnet:depth=50,width=2,image=16,base=2,channels=1,classes=3", 4, small_residual_gamma, {}, kRough,
                 1});
}

TEST(GradCheck, WresnetImageNetStem) {
    check_model({"wresnet:depth=18,width=1,image=64,base=2,channels=1,classes=3", 4, small_residual_gamma, {}, kRough});
}

TEST(GradCheck, Lstm) {
    check_model({"lstm:layers=2,hidden=4,seq=3,vocab=7,embed=5", 2, unit_embedding});
    check_model({"lstm:layers=1,hidden=3,seq=6,vocab=5", 3, unit_embedding});  // two levels of the concat tree
    // One step: no recurrent weight, so every weight gets a gradient (and trains).
    check_model({"lstm:layers=2,hidden=3,seq=1,vocab=5", 2, unit_embedding});
}

TEST(GradCheck, Transformer) {
    // Adding a bias to every key adds q . b_k to a whole row of scores, which the
    // softmax ignores: the key bias's gradient is exactly zero.
    check_model({"transformer:layers=2,d_model=8,heads=2,seq=3,vocab=7,ffn=12", 2, {}, R"(attn\.k\.b$)"});
}

}  // namespace
}  // namespace tessera
