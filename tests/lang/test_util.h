// Shared helpers for the operator tests: host tensors, seeded random data, and
// central finite differences in double precision.
#pragma once

#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/error.h"
#include "tessera/lang/kernels.h"

namespace tessera::test {

// A host tensor that owns its storage.
struct HostTensor {
    TensorType type;
    std::vector<float> f;
    std::vector<int32_t> i;
    std::vector<double> d;  // F64: batch norm's staged statistics

    HostTensor() = default;
    explicit HostTensor(Shape s, DType t = DType::F32) : type{t, std::move(s)} {
        if (t == DType::F32) f.assign(type.elements(), 0.0f);
        else if (t == DType::F64) d.assign(type.elements(), 0.0);
        else i.assign(type.elements(), 0);
    }
    TensorRef ref() {
        if (type.dtype == DType::F64) return {d.data(), type};
        return {type.dtype == DType::F32 ? (void *)f.data() : (void *)i.data(), type};
    }
    int64_t size() const { return type.elements(); }
};

inline HostTensor random_tensor(Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    HostTensor t(std::move(s));
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    for (float &v : t.f) v = d(g);
    return t;
}

inline HostTensor random_ints(Shape s, uint32_t seed, int lo, int hi) {
    HostTensor t(std::move(s), DType::I32);
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> d(lo, hi);
    for (int32_t &v : t.i) v = d(g);
    return t;
}

// Runs the op on the given inputs and returns freshly allocated outputs with the
// inferred types.
inline std::vector<HostTensor> run(const OpCall &call, std::vector<HostTensor> &inputs) {
    std::vector<TensorType> types;
    std::vector<TensorRef> refs;
    for (auto &t : inputs) {
        types.push_back(t.type);
        refs.push_back(t.ref());
    }
    std::vector<HostTensor> outs;
    for (const TensorType &t : infer_types(call, types)) outs.emplace_back(t.shape, t.dtype);
    std::vector<TensorRef> orefs;
    for (auto &o : outs) orefs.push_back(o.ref());
    run_op(call, refs, orefs);
    return outs;
}

// Expects |a - b| <= atol + rtol*|b| elementwise.
inline void expect_near(const std::vector<float> &a, const std::vector<double> &b, double atol, double rtol,
                        const char *what = "") {
    ASSERT_EQ(a.size(), b.size()) << what;
    int bad = 0;
    for (size_t k = 0; k < a.size(); k++) {
        double err = std::abs(double(a[k]) - b[k]);
        if (!(err <= atol + rtol * std::abs(b[k]))) {
            if (bad++ < 5) ADD_FAILURE() << what << " element " << k << ": got " << a[k] << ", want " << b[k];
        }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements out of tolerance";
}

// Central finite differences of a scalar function of a double vector.
// Returns d f / d x_k for every k.
inline std::vector<double> finite_diff(const std::function<double(const std::vector<double> &)> &f,
                                       std::vector<double> x, double h = 1e-6) {
    std::vector<double> g(x.size());
    for (size_t k = 0; k < x.size(); k++) {
        double x0 = x[k];
        x[k] = x0 + h;
        double fp = f(x);
        x[k] = x0 - h;
        double fm = f(x);
        x[k] = x0;
        g[k] = (fp - fm) / (2 * h);
    }
    return g;
}

inline std::vector<double> to_double(const std::vector<float> &v) { return {v.begin(), v.end()}; }

// sum_k w[k] * y[k]: the scalar "loss" whose gradient checks a backward op, where
// w is a fixed random upstream gradient dy.
inline double dot(const std::vector<double> &w, const std::vector<double> &y) {
    double s = 0;
    for (size_t k = 0; k < y.size(); k++) s += w[k] * y[k];
    return s;
}

// Expects run(call) to throw tessera::Error whose message contains `needle`.
inline void expect_error(const std::function<void()> &fn, const std::string &needle) {
    try {
        fn();
        ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what();
    }
}

inline // Runs `call` with every input and output starting 4 bytes past a 64-byte
// boundary (the executor's arena places tensors at any float offset) and expects
// exactly the results of run(). Vectorised kernels must not assume aligned memory.
void expect_same_unaligned(const OpCall &call, std::vector<HostTensor> &inputs) {
    std::vector<HostTensor> want = run(call, inputs);
    std::vector<std::vector<float>> storage;  // 4-byte elements, f32 or i32
    auto place = [&](const TensorType &t, const void *src) {
        std::vector<float> &s = storage.emplace_back(t.elements() + 32);
        uintptr_t addr = reinterpret_cast<uintptr_t>(s.data());
        float *p = s.data() + ((68 - addr % 64) % 64) / 4;
        if (src) std::memcpy(p, src, t.elements() * 4);
        return TensorRef{p, t};
    };
    storage.reserve(inputs.size() + want.size());
    std::vector<TensorRef> in, out;
    for (HostTensor &t : inputs) in.push_back(place(t.type, t.ref().data));
    for (HostTensor &t : want) out.push_back(place(t.type, nullptr));
    run_op(call, in, out);
    for (size_t k = 0; k < want.size(); k++) {
        const float *got = static_cast<const float *>(out[k].data);
        EXPECT_EQ(std::vector<float>(got, got + want[k].size()), want[k].f) << op_name(call.kind) << " output " << k;
    }
}

}  // namespace tessera::test
