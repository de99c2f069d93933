// GPU kernel cases for the optim family: both optimisers at several ranks and
// odd sizes, defaulted and explicit hyperparameters, weight decay on and off,
// and adam's step at 0 (clamped to 1), 1 and a late step.
#include <string>

#include "cases.h"
#include "tessera/types.h"

namespace tessera::test {

namespace {

using Fill = std::function<void(int, std::vector<float> &, std::vector<int32_t> &)>;

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

GpuCase make(std::string label, OpCall call, std::vector<TensorType> inputs, Fill fill) {
    return {std::move(label), std::move(call), std::move(inputs), std::move(fill), 1e-5, 1e-5};
}

// Adam's inputs: w, g and m in [-1, 1), v (a running mean of g*g) positive, and
// the step.
Fill adam_fill(int32_t step) {
    return [step](int i, std::vector<float> &f, std::vector<int32_t> &n) {
        if (i == 4) {
            n[0] = step;
            return;
        }
        for (size_t k = 0; k < f.size(); k++) {
            float u = static_cast<float>((k * 7919 + 101 * i + 7) % 1009) / 1009.0f;
            f[k] = i == 3 ? 1e-4f + u * u : 2.0f * u - 1.0f;
        }
    };
}

}  // namespace

std::vector<GpuCase> gpu_cases_optim() {
    std::vector<GpuCase> cases;
    // The kernels see every tensor flat: one element and an odd count cover them.
    for (const Shape &s : {Shape{1}, Shape{2, 3, 5, 7}}) {
        std::string sh = shape_str(s);
        cases.push_back(make("sgd_momentum defaults " + sh, {OpKind::SgdMomentum, "opt", {{"lr", 0.1}}},
                             {f32(s), f32(s), f32(s)}, {}));
        cases.push_back(make("adam defaults step 3 " + sh, {OpKind::Adam, "opt", {{"lr", 1e-3}}},
                             {f32(s), f32(s), f32(s), f32(s), {DType::I32, {}}}, adam_fill(3)));
    }
    Shape s = {7, 11};
    cases.push_back(make("sgd_momentum explicit",
                         {OpKind::SgdMomentum, "opt", {{"lr", 0.03}, {"momentum", 0.5}, {"weight_decay", 0.01}}},
                         {f32(s), f32(s), f32(s)}, {}));
    cases.push_back(make("sgd_momentum no momentum", {OpKind::SgdMomentum, "opt", {{"lr", 0.2}, {"momentum", 0.0}}},
                         {f32(s), f32(s), f32(s)}, {}));
    // Step 0 is clamped to 1; step 1 has the largest bias correction; step 1000
    // has beta1^t below float's resolution.
    for (int32_t step : {0, 1, 1000}) {
        OpCall c{OpKind::Adam,
                 "opt",
                 {{"lr", 0.01}, {"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-6}, {"weight_decay", 0.05}}};
        cases.push_back(make("adam explicit step " + std::to_string(step), c,
                             {f32(s), f32(s), f32(s), f32(s), {DType::I32, {}}}, adam_fill(step)));
    }
    return cases;
}

}  // namespace tessera::test
