// The roofline model's times against the formula worked by hand, and the HTML
// timeline of hand-made swap plans: geometry, residency, escaping, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "expect_error.h"
#include "tessera/predict/roofline.h"
#include "tessera/swap/render.h"

namespace tessera {
namespace {

using test::expect_error;

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

// ---- roofline ----

TEST(Roofline, MatmulIsComputeBoundAtItsFlopsOverPeak) {
    Graph g;
    TensorId x = g.add_data("x", f32({64, 128}));
    TensorId w = g.add_param("w", f32({128, 256}), Init::zeros());
    g.add_node({OpKind::Matmul, "fc", {}}, {x, w});
    RooflineDevice dev{"test", 1e9, 1e12, 1e-6, 1e9, 1e9};
    double flops = 2.0 * 64 * 256 * 128;
    double bytes = 4.0 * (64 * 128 + 128 * 256 + 64 * 256);
    EXPECT_DOUBLE_EQ(node_flops(g, 0), flops);
    EXPECT_DOUBLE_EQ(node_bytes(g, 0), bytes);
    std::vector<double> t = roofline_node_times(g, dev);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_DOUBLE_EQ(t[0], std::max(flops / 1e9, bytes / 1e12) + 1e-6);
    EXPECT_DOUBLE_EQ(t[0], flops / 1e9 + 1e-6);  // compute-bound on this device
}

TEST(Roofline, MatmulIsMemoryBoundOnASlowMemory) {
    Graph g;
    TensorId x = g.add_data("x", f32({64, 128}));
    TensorId w = g.add_param("w", f32({128, 256}), Init::zeros());
    g.add_node({OpKind::Matmul, "fc", {}}, {x, w});
    RooflineDevice dev{"test", 1e15, 1e6, 0, 1e9, 1e9};
    double bytes = 4.0 * (64 * 128 + 128 * 256 + 64 * 256);
    EXPECT_DOUBLE_EQ(roofline_node_times(g, dev)[0], bytes / 1e6);
}

TEST(Roofline, TransposedAndBatchedMatmulReadKFromTheRightDimension) {
    Graph g;
    TensorId xt = g.add_data("xt", f32({128, 64}));  // [K, M]
    TensorId w = g.add_param("w", f32({128, 256}), Init::zeros());
    g.add_node({OpKind::Matmul, "fc_t", {{"transpose_a", int64_t{1}}}}, {xt, w});
    TensorId a = g.add_data("a", f32({3, 5, 7}));
    TensorId b = g.add_data("b", f32({3, 7, 11}));
    g.add_node({OpKind::BatchMatmul, "bmm", {}}, {a, b});
    EXPECT_DOUBLE_EQ(node_flops(g, 0), 2.0 * 64 * 256 * 128);
    EXPECT_DOUBLE_EQ(node_flops(g, 1), 2.0 * 3 * 5 * 11 * 7);
}

TEST(Roofline, ConvolutionAndItsGradientsCountTheSameMultiplyAdds) {
    Graph g;
    TensorId x = g.add_data("x", f32({2, 3, 10, 10}));
    TensorId w = g.add_param("w", f32({8, 3, 3, 3}), Init::zeros());
    TensorId y = g.add_node({OpKind::Conv2d, "conv", {{"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}}}, {x, w})[0];
    ASSERT_EQ(g.tensor(y).type.shape, (Shape{2, 8, 10, 10}));
    g.add_node({OpKind::Conv2dGradInput, "dx",
                {{"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}, {"in_h", int64_t{10}}, {"in_w", int64_t{10}}}},
               {y, w});
    g.add_node({OpKind::Conv2dGradWeight, "dw",
                {{"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}, {"kernel_h", int64_t{3}}, {"kernel_w", int64_t{3}}}},
               {y, x});
    // Output elements 2*8*10*10, each summing Ci*KH*KW = 27 products.
    double want = 2.0 * (2 * 8 * 10 * 10) * (3 * 3 * 3);
    EXPECT_DOUBLE_EQ(node_flops(g, 0), want);
    EXPECT_DOUBLE_EQ(node_flops(g, 1), want);
    EXPECT_DOUBLE_EQ(node_flops(g, 2), want);
}

TEST(Roofline, ElementwiseIsBandwidthBoundAndCommunicationUsesTheLink) {
    Graph g;
    TensorId x = g.add_data("x", f32({1000}));
    TensorId y = g.add_node({OpKind::Relu, "relu", {}}, {x})[0];
    g.add_comm_node("ar", {{"comm", std::string("all_reduce")}}, {y}, f32({1000}), TensorRole::Activation);
    RooflineDevice dev{"test", 1e12, 1e9, 1e-6, 2e9, 1e9};
    std::vector<double> t = roofline_node_times(g, dev);
    EXPECT_DOUBLE_EQ(t[0], 8000.0 / 1e9 + 1e-6);
    EXPECT_DOUBLE_EQ(t[1], 4000.0 / 2e9);  // input bytes over the link, no launch
    EXPECT_DOUBLE_EQ(node_flops(g, 1), 0);
}

TEST(Roofline, PresetsAndErrors) {
    RooflineDevice h100 = roofline_device("h100");
    EXPECT_DOUBLE_EQ(h100.flops_per_s, 60e12);
    EXPECT_DOUBLE_EQ(h100.bytes_per_s, 3.35e12);
    EXPECT_DOUBLE_EQ(h100.host_bytes_per_s, 25e9);
    RooflineDevice cpu = roofline_device("cpu");
    EXPECT_GT(cpu.flops_per_s, 0);
    EXPECT_LT(cpu.flops_per_s, h100.flops_per_s);
    EXPECT_EQ(roofline_device_names(), (std::vector<std::string>{"cpu", "h100"}));
    expect_error([] { roofline_device("tpu"); }, "unknown roofline device 'tpu'; valid: cpu, h100");

    Graph g;
    TensorId x = g.add_data("x", f32({10}));
    TensorId y = g.add_node({OpKind::Relu, "relu", {}}, {x})[0];
    expect_error([&] { roofline_node_times(g, RooflineDevice{"bad", 0, 1e9, 0, 1, 1}); },
                 "roofline device 'bad' needs positive flops_per_s");
    g.add_comm_node("ar", {{"comm", std::string("all_reduce")}}, {y}, f32({10}), TensorRole::Activation);
    expect_error([&] { roofline_node_times(g, RooflineDevice{"nolink", 1e9, 1e9, 0, 0, 1}); },
                 "has no link bandwidth (link_bytes_per_s = 0) but communication node 'ar' needs one");
}

// Matrix products run at their operand type's rate; every other operator
// computes in f32 whatever it stores, so only its bytes shrink.
TEST(Roofline, MatrixProductsRunAtTheirPrecisionsRate) {
    Graph g;
    auto bf16 = [](Shape s) { return TensorType{DType::BF16, std::move(s)}; };
    TensorId x = g.add_data("x", bf16({1024, 1024}));
    TensorId w = g.add_data("w", bf16({1024, 1024}));
    TensorId y = g.add_node({OpKind::Matmul, "mm", {}}, {x, w})[0];
    g.add_node({OpKind::Relu, "relu", {}}, {y});
    RooflineDevice dev{"test", 1e12, 1e15, 0, 1, 1, 1, 1, 0, 4e12, 8e12};
    const double flops = 2.0 * 1024 * 1024 * 1024;
    std::vector<double> t = roofline_node_times(g, dev);
    EXPECT_DOUBLE_EQ(t[0], flops / 8e12);
    EXPECT_DOUBLE_EQ(t[1], 1024.0 * 1024 / 1e12);  // one flop an element at the f32 rate
    EXPECT_DOUBLE_EQ(node_bytes(g, 1), 2.0 * 1024 * 1024 * 2);
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(dev, DType::F32), 1e12);
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(with_precision(dev, Precision::TF32), DType::F32), 4e12);
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(with_precision(dev, Precision::TF32), DType::F16), 8e12);
    RooflineDevice h100 = roofline_device("h100");
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(h100, DType::BF16), 790e12);
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(with_precision(h100, Precision::TF32), DType::F32), 370e12);
    // No faster path on the CPU: every precision at the fp32 rate.
    RooflineDevice cpu = roofline_device("cpu");
    EXPECT_DOUBLE_EQ(matmul_flops_per_s(cpu, DType::BF16), cpu.flops_per_s);
}

// ---- the HTML timeline ----

// x (data, 4 KiB) -> fc (matmul with w) -> h (8 KiB, named "fc" after its node) -> act
// (relu) -> y (8 KiB).
struct Chain {
    Graph g;
    TensorId x, w, h, y;
    Chain(const std::string &fc_name = "fc") {
        x = g.add_data("x", f32({16, 64}));
        w = g.add_param("w", f32({64, 128}), Init::zeros());
        h = g.add_node({OpKind::Matmul, fc_name, {}}, {x, w})[0];
        y = g.add_node({OpKind::Relu, "act", {}}, {h})[0];
    }
};

SwapStep compute(NodeId n, double s, double e) {
    SwapStep st;
    st.node = n;
    st.start_s = s;
    st.end_s = e;
    return st;
}

SwapStep move(SwapStep::Kind k, TensorId t, int64_t bytes, int64_t offset, double s, double e) {
    SwapStep st;
    st.kind = k;
    st.tensor = t;
    st.bytes = bytes;
    st.offset = offset;
    st.start_s = s;
    st.end_s = e;
    return st;
}

// fc in [0,1]; h swapped out in [1,2] and back in [2,3]; act in [3,4].
SwapPlan chain_plan(const Chain &c) {
    SwapPlan p;
    p.order = {0, 1};
    p.arena_bytes = 64 * 1024;
    p.pinned.assign(static_cast<size_t>(c.g.num_tensors()), -1);
    p.pinned[static_cast<size_t>(c.x)] = 0;
    p.pinned[static_cast<size_t>(c.w)] = 4096;
    p.pinned_bytes = 4096 + 32768;
    p.steps = {compute(0, 0, 1), move(SwapStep::Kind::SwapOut, c.h, 8192, 40960, 1, 2),
               move(SwapStep::Kind::SwapIn, c.h, 8192, 40960, 2, 3), compute(1, 3, 4)};
    p.steps[2].after = {1};
    p.time_s = 4;
    p.ideal_time_s = 2;
    return p;
}

size_t count(const std::string &hay, const std::string &needle) {
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
}

TEST(SwapHtml, EveryStepIsABoxInItsLaneAtItsSimulatedTime) {
    Chain c;
    std::string html = swap_plan_html_section(c.g, chain_plan(c));
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_EQ(html.find("<script"), std::string::npos);
    for (const char *lane : {">compute</text>", ">swap-out</text>", ">swap-in</text>"})
        EXPECT_NE(html.find(lane), std::string::npos) << lane;
    // Lanes are 22 units tall from y=0, boxes inset 2; the axis starts at x=90
    // and 960 units span the 4 s iteration.
    auto box = [](double x, double y, double w) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\"", x, y, w);
        return std::string(buf);
    };
    EXPECT_NE(html.find(box(90 + 0 * 240, 2, 240)), std::string::npos) << html;
    EXPECT_NE(html.find(box(90 + 1 * 240, 24, 240)), std::string::npos);
    EXPECT_NE(html.find(box(90 + 2 * 240, 46, 240)), std::string::npos);
    EXPECT_NE(html.find(box(90 + 3 * 240, 2, 240)), std::string::npos);
    // Hovering names the node or the tensor.
    EXPECT_NE(html.find("<title>fc (matmul): 0 s to 1.00 s</title>"), std::string::npos);
    EXPECT_NE(html.find("<title>swap-out fc, 8.00 KiB, slot at 40960: 1.00 s to 2.00 s</title>"),
              std::string::npos);
    EXPECT_NE(html.find("<title>swap-in fc, 8.00 KiB"), std::string::npos);
    EXPECT_EQ(count(html, "<rect x="), 4 + 4 + 1u);  // lane backgrounds, steps, memory frame
    EXPECT_NE(html.find("50.0% of ideal speed"), std::string::npos);
}

TEST(SwapHtml, ResidencyFollowsTheStepsAndNeverCountsASwapTwice) {
    Chain c;
    // Pinned: x 4 KiB + w 32 KiB. h (8 KiB) is resident [0,2] and [2,4]; y
    // (8 KiB) [3,4]. At t=2 h leaves and comes back: counted once. Peak at
    // [3,4]: 36 + 8 + 8 = 52 KiB.
    std::string html = swap_plan_html_section(c.g, chain_plan(c));
    EXPECT_NE(html.find("peak resident (from steps)</th><td>52.0 KiB"), std::string::npos) << html;

    // Without the swap, h stays from 0 to 4: the same peak. Take y away (act
    // never runs) and the peak is 36 + 8 = 44 KiB.
    SwapPlan p = chain_plan(c);
    p.steps.pop_back();
    html = swap_plan_html_section(c.g, p);
    EXPECT_NE(html.find("peak resident (from steps)</th><td>44.0 KiB"), std::string::npos) << html;
}

TEST(SwapHtml, BudgetLineSitsAtTheArenaBytes) {
    Chain c;
    SwapPlan p = chain_plan(c);
    std::string html = swap_plan_html_section(c.g, p);
    // The plot is 160 units tall under a top of 1.08 x max(budget, peak).
    double mem_top = 4 * 22 + 18 + 16;
    double y = mem_top + 160 - 65536.0 / (65536.0 * 1.08) * 160;
    char buf[160];
    std::snprintf(buf, sizeof buf, "x1=\"90.0\" y1=\"%.2f\" x2=\"1050.0\" y2=\"%.2f\" stroke=\"#e15759\"", y, y);
    EXPECT_NE(html.find(buf), std::string::npos) << buf << "\n" << html;
    EXPECT_NE(html.find("<title>budget 64.0 KiB</title>"), std::string::npos);
}

TEST(SwapHtml, NamesAreEscaped) {
    Chain c("fc<1>&\"q\"");
    std::string html = swap_plan_html_section(c.g, chain_plan(c));
    EXPECT_NE(html.find("fc&lt;1&gt;&amp;&quot;q&quot; (matmul)"), std::string::npos);
    EXPECT_EQ(html.find("fc<1>"), std::string::npos);
}

TEST(SwapHtml, AnEmptyPlanSaysSo) {
    Chain c;
    SwapPlan p;
    std::string html = swap_plan_html_section(c.g, p);
    EXPECT_NE(html.find("The plan has no steps to show."), std::string::npos);
    EXPECT_EQ(html.find("<svg"), std::string::npos);
}

TEST(SwapHtml, APlanForAnotherGraphIsAnError) {
    Chain c;
    SwapPlan p = chain_plan(c);
    p.steps[3].node = 7;
    expect_error([&] { swap_plan_html_section(c.g, p); },
                 "swap plan step 3 computes node 7 but the graph has 2 nodes; was the plan made for another graph?");
    p = chain_plan(c);
    p.steps[1].tensor = 99;
    expect_error([&] { swap_plan_html_section(c.g, p); },
                 "swap plan step 1 (swap-out) moves tensor 99 but the graph has 4 tensors");
    p = chain_plan(c);
    p.steps[2].end_s = 1;
    expect_error([&] { swap_plan_html_section(c.g, p); },
                 "swap plan step 2 has simulated times [2, 1]; a step must end no earlier than it starts");
}

}  // namespace
}  // namespace tessera
