#include "tessera/train/loss_scaler.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/json_input.h"

namespace tessera {

namespace {

// The largest scale: far below f32's range, where the scale tensor lives.
constexpr double kMaxLossScale = 0x1p64;

}  // namespace

void check_loss_scaler_config(const LossScalerConfig &c) {
    TESSERA_CHECK(std::isfinite(c.init_scale) && c.init_scale >= kMinLossScale && c.init_scale <= kMaxLossScale,
                  "--loss-scale must be in [2^-24, 2^64] (about 6e-8 to 1.8e19), got ", c.init_scale);
    TESSERA_CHECK(c.growth_interval >= 1, "--loss-scale-growth-interval must be at least 1, got ",
                  c.growth_interval);
}

LossScaler::LossScaler(bool enabled, LossScalerConfig config)
    : enabled_(enabled), config_(config), scale_(enabled ? config.init_scale : 1.0) {}

bool LossScaler::update(double nonfinite, int64_t step) {
    if (nonfinite == 0) {
        skipped_in_a_row_ = 0;
        if (++finite_in_a_row_ < config_.growth_interval) return false;
        finite_in_a_row_ = 0;
        scale_ = std::min(scale_ * 2, kMaxLossScale);
        return false;
    }
    finite_in_a_row_ = 0;
    skipped_++;
    skipped_in_a_row_++;
    scale_ /= 2;
    TESSERA_CHECK(scale_ >= kMinLossScale, "fp16 loss scaling: step ", step, " has non-finite gradients with the "
                  "loss scale at 2^", std::ilogb(scale_ * 2), ", and ", skipped_in_a_row_, " steps in a row were "
                  "skipped: the scale fell below 2^-24, so the gradients are not finite at any scale (fp16 holds "
                  "at most 65504). The run diverged, or its activations overflow fp16: lower --lr, or train with "
                  "--precision bf16");
    return true;
}

std::string LossScaler::to_json() const {
    return nlohmann::json{{"scale", scale_},
                          {"finite_in_a_row", finite_in_a_row_},
                          {"skipped_in_a_row", skipped_in_a_row_},
                          {"skipped_steps", skipped_}}
        .dump();
}

void LossScaler::restore(const std::string &json, const std::string &path) {
    const nlohmann::json j = parse_json_input(json, path + ": the 'loss_scaler' metadata");
    auto count = [&](const char *key) {
        TESSERA_CHECK(j.is_object() && j.contains(key) && j.at(key).is_number_integer() && j.at(key).get<int64_t>() >= 0,
                      path, ": the 'loss_scaler' metadata has no count '", key, "' (a damaged checkpoint?)");
        return j.at(key).get<int64_t>();
    };
    skipped_ = count("skipped_steps");
    if (!enabled_) return;  // another precision's run: the master weights and Adam's step carry over
    TESSERA_CHECK(j.contains("scale") && j.at("scale").is_number() && j.at("scale").get<double>() >= kMinLossScale &&
                      j.at("scale").get<double>() <= kMaxLossScale,
                  path, ": the 'loss_scaler' metadata has no scale in [2^-24, 2^64] (a damaged checkpoint?)");
    scale_ = j.at("scale").get<double>();
    finite_in_a_row_ = count("finite_in_a_row");
    skipped_in_a_row_ = count("skipped_in_a_row");
}

}  // namespace tessera
