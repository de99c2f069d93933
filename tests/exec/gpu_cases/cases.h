// Test cases for the GPU kernels: one list per operator family, shared by the
// host test (the kernel bodies run on the host, tests/exec/gpu_kernels_host_test.cpp)
// and the GPU test (the kernels on a CUDA device, tests/exec/cuda_device_test.cpp,
// label gpu). Each case is compared with tessera::run_op(), the CPU kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tessera/lang/kernels.h"

namespace tessera::test {

struct GpuCase {
    std::string label;               // unique; shown when the case fails
    OpCall call;
    std::vector<TensorType> inputs;  // outputs follow from infer_types()
    // Fills input `i` (f32 data in `f`, or i32 data in `n`, by the input's
    // dtype); empty: uniform floats in [-1, 1) from a seeded generator.
    std::function<void(int i, std::vector<float> &f, std::vector<int32_t> &n)> fill;
    // An output element passes when |gpu - cpu| <= atol + rtol * |cpu|.
    double rtol = 1e-5, atol = 1e-5;
};

std::vector<GpuCase> gpu_cases_matmul();
std::vector<GpuCase> gpu_cases_elementwise();
std::vector<GpuCase> gpu_cases_softmax();
std::vector<GpuCase> gpu_cases_norm();
std::vector<GpuCase> gpu_cases_conv();
std::vector<GpuCase> gpu_cases_layout();
std::vector<GpuCase> gpu_cases_misc();
std::vector<GpuCase> gpu_cases_optim();

// The data of input `i` of `c`, sized by its dtype (f32 in `f`, i32 in `n`):
// the case's fill, or uniform floats in [-1, 1) from seed + 7919 i.
inline void case_input(const GpuCase &c, int i, uint32_t seed, std::vector<float> &f, std::vector<int32_t> &n) {
    const TensorType &t = c.inputs[static_cast<size_t>(i)];
    f.assign(t.dtype == DType::F32 ? static_cast<size_t>(t.elements()) : 0, 0.0f);
    n.assign(t.dtype == DType::I32 ? static_cast<size_t>(t.elements()) : 0, 0);
    if (c.fill) return c.fill(i, f, n);
    std::mt19937 g(seed + 7919 * static_cast<uint32_t>(i));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float &v : f) v = d(g);
}

// A deterministic spread of values in [lo, hi), different for each input.
inline void spread(std::vector<float> &f, int input, float lo, float hi) {
    for (size_t k = 0; k < f.size(); k++)
        f[k] = lo + (hi - lo) * static_cast<float>((k * 7919 + 31 * input + 5) % 997) / 997.0f;
}

inline std::vector<GpuCase> all_gpu_cases() {
    std::vector<GpuCase> all;
    for (auto *f : {gpu_cases_matmul, gpu_cases_elementwise, gpu_cases_softmax, gpu_cases_norm, gpu_cases_conv,
                    gpu_cases_layout, gpu_cases_misc, gpu_cases_optim})
        for (GpuCase &c : f()) all.push_back(std::move(c));
    return all;
}

}  // namespace tessera::test
