// GPU kernels of the optim family (see exec.h for the context they run on).
//
// Every tensor is seen flat and one i is one element. Each i reads all of its
// inputs before writing any output, so the outputs may alias the inputs (an
// in-place update), as they may for the CPU kernels. The hyperparameters are
// read and defaulted as lang/src/optim.cpp does (infer_types() has already
// checked their ranges) and rounded to float, as the CPU kernels take them.
#pragma once

#include <cmath>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace opt {

// v_new = momentum*v + g + weight_decay*w;  w_new = w - lr*v_new.
struct SgdMomentumKernel {
    const float *w, *g, *v;
    float *w_new, *v_new;
    float lr, momentum, wd;
    TESSERA_HD void operator()(int64_t i) const {
        float wi = w[i], gi = g[i], vi = v[i];
        float vn = momentum * vi + gi + wd * wi;
        v_new[i] = vn;
        w_new[i] = wi - lr * vn;
    }
};

// Adam's bias corrections 1 - beta^t, t = max(step, 1), computed once by one
// thread: step is an i32 tensor in device memory that the host cannot read.
struct AdamCorrectionKernel {
    const int32_t *step;
    float *corr;  // [2]
    float b1, b2;
    TESSERA_HD void operator()(int64_t) const {
        float t = static_cast<float>(step[0] < 1 ? 1 : step[0]);
        corr[0] = 1.0f - powf(b1, t);
        corr[1] = 1.0f - powf(b2, t);
    }
};

// m_new = b1*m + (1-b1)*g;  v_new = b2*v + (1-b2)*g*g;
// w_new = w - lr*(mhat/(sqrt(vhat) + eps) + weight_decay*w), mhat = m_new/corr[0], vhat = v_new/corr[1].
struct AdamKernel {
    const float *w, *g, *m, *v, *corr;
    float *w_new, *m_new, *v_new;
    float lr, b1, b2, eps, wd;
    TESSERA_HD void operator()(int64_t i) const {
        float wi = w[i], gi = g[i], mi = m[i], vi = v[i];
        float mn = b1 * mi + (1.0f - b1) * gi;
        float vn = b2 * vi + (1.0f - b2) * gi * gi;
        float mhat = mn / corr[0], vhat = vn / corr[1];
        m_new[i] = mn;
        v_new[i] = vn;
        w_new[i] = wi - lr * (mhat / (sqrtf(vhat) + eps) + wd * wi);
    }
};

inline float attr(const OpCall &c, const char *name, double fallback) {
    return static_cast<float>(c.attrs.get_float(c.who(), name, fallback));
}

}  // namespace opt

template <class Exec>
void run_optim(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // Loss scaling (fp16) runs on the CPU only; a GPU refuses fp16 before planning.
    const size_t plain = c.kind == OpKind::SgdMomentum ? 3 : 5;
    TESSERA_CHECK(c.kind != OpKind::NonfiniteCount && in.size() == plain, c.who(),
                  ": loss scaling (fp16) has no GPU kernels yet; docs/limitations.md, Mixed precision");
    int64_t n = in[0].type.elements();
    float lr = static_cast<float>(c.attrs.get_float(c.who(), "lr"));
    float wd = opt::attr(c, "weight_decay", 0.0);
    if (c.kind == OpKind::SgdMomentum) {
        ex.for_each(n, opt::SgdMomentumKernel{f32(in[0]), f32(in[1]), f32(in[2]), f32_out(out[0]), f32_out(out[1]),
                                              lr, opt::attr(c, "momentum", 0.9), wd});
        return;
    }
    TESSERA_INTERNAL_ASSERT(c.kind == OpKind::Adam, "not an optim operator: ", c.who());
    float b1 = opt::attr(c, "beta1", 0.9), b2 = opt::attr(c, "beta2", 0.999), eps = opt::attr(c, "eps", 1e-8);
    float *corr = ex.workspace(2 * sizeof(float));
    ex.for_each(1, opt::AdamCorrectionKernel{i32(in[4]), corr, b1, b2});
    ex.for_each(n, opt::AdamKernel{f32(in[0]), f32(in[1]), f32(in[2]), f32(in[3]), corr, f32_out(out[0]),
                                   f32_out(out[1]), f32_out(out[2]), lr, b1, b2, eps, wd});
}

}  // namespace tessera::gpu
