// Dynamic loss scaling for fp16 training, with PyTorch GradScaler's rules.
//
// The training graph (OptimizerConfig::loss_scaling) seeds the loss's
// gradient with the scale, counts the step's non-finite gradient elements,
// and skips every update when that count is not 0. The scaler is the host
// half: the scale each step runs with, and what a step's count does to it.
//   * a step with a non-finite gradient is skipped and halves the scale;
//   * `growth_interval` finite steps in a row double it;
//   * a scale below 2^-24 stops the run (kMinLossScale): the gradients are
//     not finite at any scale fp16 can use.
// Every rank of a partitioned job holds the same scaler: each step's count is
// all-reduced inside the step and then broadcast from rank 0 (trainer.cpp).
// Its state rides in the checkpoint, so a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

inline constexpr double kMinLossScale = 0x1p-24;

struct LossScalerConfig {
    double init_scale = 65536;       // 2^16, GradScaler's default
    int64_t growth_interval = 2000;  // finite steps before the scale doubles
};

// tessera::Error naming the flag for an initial scale outside [2^-24, 2^64]
// or a growth interval below 1.
void check_loss_scaler_config(const LossScalerConfig &c);

class LossScaler {
public:
    // Off: scale() is 1 and update() is never called; the skipped steps a
    // checkpoint carries still count (Adam's step is the updates applied).
    LossScaler(bool enabled, LossScalerConfig config);

    bool enabled() const { return enabled_; }
    double scale() const { return scale_; }
    int64_t skipped_steps() const { return skipped_; }

    // After 1-based step `step`, whose gradients held `nonfinite` non-finite
    // elements: returns whether the step was skipped. tessera::Error when the
    // scale falls below kMinLossScale.
    bool update(double nonfinite, int64_t step);

    // The state as the checkpoint's "loss_scaler" metadata (JSON), and back;
    // restore's errors name `path`. An off scaler takes the skipped steps only.
    std::string to_json() const;
    void restore(const std::string &json, const std::string &path);

private:
    bool enabled_;
    LossScalerConfig config_;
    double scale_;
    int64_t finite_in_a_row_ = 0;  // since the last change of scale (GradScaler's growth tracker)
    int64_t skipped_in_a_row_ = 0;
    int64_t skipped_ = 0;
};

}  // namespace tessera
