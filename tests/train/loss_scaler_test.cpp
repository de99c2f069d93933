// The loss scaler (train/loss_scaler.h) against PyTorch GradScaler's update
// rule, written out here as torch/amp/grad_scaler.py's _amp_update_scale_
// states it: on an inf or NaN, scale *= 0.5 and the tracker restarts; else
// the tracker counts, and at growth_interval the scale doubles and it restarts.
// GradScaler doubles only to a finite f32; Tessera stops at 2^64.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "../expect_error.h"
#include "tessera/train/loss_scaler.h"

namespace tessera {
namespace {

using test::error_of;

// f throws tessera::Error, and its message holds every fragment.
template<typename F>
void expect_error(F f, std::initializer_list<const char *> fragments) {
    const std::string what = error_of(f);
    for (const char *text : fragments) EXPECT_NE(what.find(text), std::string::npos) << what;
}

struct Reference {
    double scale;
    int64_t tracker = 0, interval;
    void step(bool found_inf) {
        if (found_inf) {
            scale *= 0.5;
            tracker = 0;
            return;
        }
        if (++tracker == interval) {
            scale = std::min(scale * 2.0, 0x1p64);
            tracker = 0;
        }
    }
};

TEST(LossScaler, FollowsGradScalersRuleOverRandomOverflows) {
    for (int64_t interval : {1, 2, 3, 7, 2000}) {
        LossScaler s(true, {65536, interval});
        Reference ref{65536, 0, interval};
        std::mt19937 rng(static_cast<unsigned>(interval));
        int64_t skipped = 0;
        for (int64_t step = 1; step <= 5000; step++) {
            // One step in 5 overflows; with long intervals the scale falls
            // until the run stops, where the reference falls below 2^-24.
            const bool overflow = rng() % 5 == 0;
            ref.step(overflow);
            if (ref.scale < 0x1p-24) {
                EXPECT_THROW(s.update(3.0, step), Error) << step;
                break;
            }
            ASSERT_EQ(s.update(overflow ? 3.0 : 0.0, step), overflow) << step;
            skipped += overflow;
            ASSERT_EQ(s.scale(), ref.scale) << "interval " << interval << ", step " << step;
            ASSERT_EQ(s.skipped_steps(), skipped);
        }
    }
}

TEST(LossScaler, GrowsAfterTheIntervalOfFiniteSteps) {
    LossScaler s(true, {1024, 3});
    for (int64_t step = 1; step <= 9; step++) EXPECT_FALSE(s.update(0, step));
    EXPECT_EQ(s.scale(), 1024 * 8);
    EXPECT_TRUE(s.update(1, 10));
    EXPECT_EQ(s.scale(), 1024 * 4);
    EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, AScaleBelowTwoToTheMinus24StopsTheRun) {
    LossScaler s(true, {0x1p-22, 2000});
    EXPECT_TRUE(s.update(1, 1));
    EXPECT_TRUE(s.update(5, 2));
    EXPECT_EQ(s.scale(), 0x1p-24);
    expect_error([&] { s.update(1, 3); }, {"step 3 has non-finite gradients with the loss scale at 2^-24",
                                           "3 steps in a row were skipped", "fell below 2^-24",
                                           "--precision bf16"});
}

TEST(LossScaler, StateRoundTripsThroughTheCheckpointText) {
    LossScaler a(true, {65536, 4});
    const bool overflows[] = {true, false, false, true, true, false, false, false};
    int64_t step = 0;
    for (bool o : overflows) a.update(o ? 1 : 0, ++step);
    LossScaler b(true, {65536, 4});
    b.restore(a.to_json(), "ckpt");
    // The two continue alike, through a growth and a skip.
    for (int k = 0; k < 12; k++) {
        const bool o = k == 7;
        ++step;
        EXPECT_EQ(a.update(o, step), b.update(o, step));
        EXPECT_EQ(a.scale(), b.scale()) << step;
        EXPECT_EQ(a.skipped_steps(), b.skipped_steps());
    }
    // Off (another precision's run), only the skipped steps carry over.
    LossScaler off(false, {});
    off.restore(a.to_json(), "ckpt");
    EXPECT_EQ(off.scale(), 1.0);
    EXPECT_EQ(off.skipped_steps(), a.skipped_steps());
}

TEST(LossScaler, DamagedStateAndBadSettingsAreNamed) {
    LossScaler s(true, {});
    expect_error([&] { s.restore("{\"scale\": 8}", "dir/checkpoint.safetensors"); },
                 {"dir/checkpoint.safetensors", "no count 'skipped_steps'"});
    expect_error([&] { s.restore(R"({"scale": -1, "skipped_steps": 0, "finite_in_a_row": 0, "skipped_in_a_row": 0})",
                                 "f"); },
                 {"f: the 'loss_scaler' metadata has no scale in [2^-24, 2^64]"});
    expect_error([&] { s.restore("not json", "f"); }, {"f: the 'loss_scaler' metadata"});
    expect_error([] { check_loss_scaler_config({0, 2000}); }, {"--loss-scale must be in [2^-24, 2^64]", "got 0"});
    expect_error([] { check_loss_scaler_config({std::nan(""), 2000}); }, {"--loss-scale must be in"});
    expect_error([] { check_loss_scaler_config({1, 0}); }, {"--loss-scale-growth-interval must be at least 1"});
    check_loss_scaler_config({0x1p-24, 1});
    check_loss_scaler_config({0x1p64, 1});
}

}  // namespace
}  // namespace tessera
