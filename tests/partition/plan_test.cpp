// The plan as a value: its JSON round trip, the errors of malformed plan files,
// and the renderers, all on hand-built plans (the search is tested elsewhere).
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/partition.h"
#include "tessera/partition/plan.h"
#include "tessera/partition/render.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using test::expect_error;

bool contains(const std::string &haystack, const std::string &needle) {
    return haystack.find(needle) != std::string::npos;
}

// The first line of `text` that contains `needle`, with runs of spaces squeezed
// to one, so that checks do not depend on column widths.
std::string line_with(const std::string &text, const std::string &needle) {
    size_t at = text.find(needle);
    if (at == std::string::npos) return "(no line with '" + needle + "')";
    size_t b = text.rfind('\n', at), e = text.find('\n', at);
    std::string line = text.substr(b == std::string::npos ? 0 : b + 1,
                                   (e == std::string::npos ? text.size() : e) - (b == std::string::npos ? 0 : b + 1));
    std::string out;
    for (char c : line)
        if (!(c == ' ' && (out.empty() || out.back() == ' '))) out += c;
    return out;
}

int count(const std::string &haystack, const std::string &needle) {
    int n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) n++;
    return n;
}

// Every field differs from its default, and the doubles are ones that print
// badly with too few digits.
Plan sample_plan() {
    Plan p;
    p.model = "mlp:hidden=64,layers=2";
    p.strategy = "tofu";
    p.devices = 4;
    p.machine = Machine{"two boxes", {LinkLevel{"node", 2, 12.5e9 / 3, 1.0 / 3 * 1e-5},
                                      LinkLevel{"gpu", 2, 0.1 + 0.2, 7e-7}}};
    p.cuts = {Cut{2, 0}, Cut{2, 1}};
    p.ops_before_coarsening = 11;
    p.ops_after_coarsening = 5;
    p.tensors_before_coarsening = 17;
    p.tensors_after_coarsening = 6;
    p.ops = {OpPlan{"fc1", "matmul", 0, {"split m", "split k (partial sum)"}, {"fc1.w"}, {"fc1"}},
             OpPlan{"act<&>", "relu", 1, {"split m", "split n"}, {"fc1"}, {"act<&>"}},
             OpPlan{"fc1.grad", "matmul", 0, {"replicate", "split m"}, {"act<&>"}, {"fc1.w"}}};
    p.tensors = {TensorPlan{"fc1.w", "param", {784, 64}, {392, 32}, 2, {Layout::split(0), Layout::split(1)},
                            784 * 64 * 4, 392 * 32 * 4},
                 TensorPlan{"fc1", "activation", {32, 64}, {16, 64}, 3, {Layout::split(0), Layout::replicated()},
                            32 * 64 * 4, 16 * 64 * 4},
                 TensorPlan{"act<&>", "activation", {32, 64}, {8, 64}, 3, {Layout::split(0), Layout::split(0)},
                            32 * 64 * 4, 8 * 64 * 4}};
    p.comm = {CommStep{0, CommKind::AllReduce, "fc1.grad", "fc1.w", "output 0: partial sums -> replicated", 1572864,
                       1.0 / 7},
              CommStep{1, CommKind::AllGather, "act<&>", "fc1", "input 0: split(1) -> replicated", 3 * 1024, 2e-6},
              CommStep{1, CommKind::Halo, "fc1", "fc1.w", "stage row_sum", 100, 0}};
    p.level_bytes = {1572864, 3172};
    p.search_bytes = 1572864 + 3172;
    p.comm_bytes = 1572864 + 3172;  // not made to run: the search's count
    p.predicted_comm_time_s = 1.0 / 7 + 2e-6;
    p.search_time_s = 0.0123456789;
    p.memory = MemoryFootprint{100, 200, 300, 400, 500};
    p.per_device_peak_bytes = 3 * 1024 * 1024;
    p.single_device_peak_bytes = 12 * 1024 * 1024;
    p.notes = {"fc1.b: no dimension of [10] divides 4 ways; replicated", "second note"};
    return p;
}

TEST(PlanJson, RoundTripsEveryField) {
    Plan p = sample_plan();
    for (int indent : {-1, 0, 2}) {
        Plan q = plan_from_json(plan_to_json(p, indent), "plan.json");
        EXPECT_EQ(q, p) << "indent " << indent;
        // Doubles compare bit for bit, not within a tolerance.
        EXPECT_EQ(q.machine.levels[1].bandwidth, 0.1 + 0.2);
        EXPECT_EQ(q.comm[0].time_s, 1.0 / 7);
    }
    EXPECT_EQ(plan_from_json(plan_to_json(Plan{}), "empty"), Plan{});
    // Made to run over two cuts: what lowering sends, beside the search's count.
    p.executable = true;
    p.rank_comm_bytes = {400000, 410000, 390000, 380000};
    p.comm_bytes = p.lowered_comm_bytes();
    EXPECT_EQ(plan_from_json(plan_to_json(p), "plan.json"), p);
}

TEST(PlanJson, RoundTripsASearchedPlan) {
    // What partition() writes, on a hierarchical machine, reads back equal; and
    // the renderers accept it.
    Model m = build_model("cnn", 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    Machine machine{"hier", {LinkLevel{"node", 2, 10e9, 1e-5}, LinkLevel{"gpu", 3, 1e11 / 3, 2e-6}}};
    PartitionOptions o;
    o.model = "cnn";
    Plan p = partition(m.graph, machine, o);
    ASSERT_FALSE(p.comm.empty());
    EXPECT_EQ(plan_from_json(plan_to_json(p), "cnn.json"), p);
    EXPECT_TRUE(contains(plan_table(p), "level 2 (3-way over gpu)"));
    EXPECT_TRUE(contains(plan_html(p), p.ops.back().node));
    EXPECT_TRUE(contains(plan_dot(p), p.ops.front().node));
}

TEST(PlanJson, RoundTripsNonFiniteTimes) {
    // A link of zero bandwidth predicts an infinite time; JSON has no infinity.
    Plan p = sample_plan();
    p.predicted_comm_time_s = std::numeric_limits<double>::infinity();
    p.comm[0].time_s = -std::numeric_limits<double>::infinity();
    Plan q = plan_from_json(plan_to_json(p), "plan.json");
    EXPECT_EQ(q, p);
    p.search_time_s = std::nan("");
    EXPECT_TRUE(std::isnan(plan_from_json(plan_to_json(p), "plan.json").search_time_s));
}

TEST(PlanJson, HasTheDocumentedKeysAndUnits) {
    json j = json::parse(plan_to_json(sample_plan()));
    for (const char *key :
         {"format", "version", "model", "strategy", "devices", "machine", "cuts", "ops_before_coarsening",
          "ops_after_coarsening", "tensors_before_coarsening", "tensors_after_coarsening", "comm_bytes",
          "search_bytes", "level_bytes",
          "predicted_comm_time_s", "search_time_s", "per_device_peak_bytes", "single_device_peak_bytes", "memory",
          "ops", "tensors", "comm", "notes"})
        EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["format"], "tessera-plan");
    EXPECT_EQ(j["version"], 1);
    EXPECT_EQ(j["comm_bytes"], 1572864 + 3172);
    EXPECT_EQ(j["search_bytes"], 1572864 + 3172);
    EXPECT_EQ(j["memory"]["total"], 1500);
    EXPECT_EQ(j["memory"]["comm_buffers"], 500);
    EXPECT_EQ(j["cuts"][1], json({{"k", 2}, {"link", 1}}));
    EXPECT_EQ(j["tensors"][1]["layout"], json({"split(0)", "replicated"}));
    EXPECT_EQ(j["comm"][0]["kind"], "all-reduce");
    // Bandwidth in bytes/s and latency in seconds, raw, so that they round-trip.
    EXPECT_EQ(j["machine"]["levels"][0]["bandwidth"].get<double>(), 12.5e9 / 3);
    EXPECT_EQ(j["machine"]["levels"][1]["latency"].get<double>(), 7e-7);
}

TEST(PlanJson, SameInputSameText) {
    EXPECT_EQ(plan_to_json(sample_plan()), plan_to_json(sample_plan()));
    Plan p = sample_plan();
    p.search_time_s = 99;
    json a = json::parse(plan_to_json(sample_plan())), b = json::parse(plan_to_json(p));
    EXPECT_NE(a, b);
    a.erase("search_time_s");
    b.erase("search_time_s");
    EXPECT_EQ(a, b);
}

// The sample plan's JSON with one edit applied.
std::string edited(const std::function<void(json &)> &edit) {
    json j = json::parse(plan_to_json(sample_plan()));
    edit(j);
    return j.dump();
}

TEST(PlanJson, MalformedInputNamesSourceAndField) {
    auto load = [](const std::string &text) { return [text] { plan_from_json(text, "plan.json"); }; };
    expect_error(load("{\"format\": "), "plan.json: not valid JSON");
    expect_error(load("[1, 2]"), "plan.json: a plan must be a JSON object");
    expect_error(load(edited([](json &j) { j["format"] = "tessera-graph"; })),
                 "plan.json: 'format' is \"tessera-graph\", not \"tessera-plan\"");
    expect_error(load(edited([](json &j) { j["version"] = 2; })),
                 "plan.json: plan format version 2 is not supported; this build reads version 1");
    expect_error(load(edited([](json &j) { j.erase("comm_bytes"); })), "plan.json: missing field 'comm_bytes'");
    expect_error(load(edited([](json &j) { j["comm_bytes"] = 1.5; })), "plan.json: 'comm_bytes' must be an integer");
    expect_error(load(edited([](json &j) { j["comm_bytes"] = "12"; })), "plan.json: 'comm_bytes' must be an integer");
    expect_error(load(edited([](json &j) { j["comm_bytes"] = -1; })), "plan.json: 'comm_bytes' must not be negative");
    expect_error(load(edited([](json &j) { j["devices"] = 0; })), "plan.json: 'devices' must be an integer in [1, ");
    expect_error(load(edited([](json &j) { j["devices"] = int64_t{1} << 40; })),
                 "plan.json: 'devices' must be an integer in [1, ");
    expect_error(load(edited([](json &j) { j["model"] = 3; })), "plan.json: 'model' must be a string, got 3");
    expect_error(load(edited([](json &j) { j["predicted_comm_time_s"] = "soon"; })),
                 "plan.json: 'predicted_comm_time_s' must be a number, got \"soon\"");
    expect_error(load(edited([](json &j) { j["ops"][1]["strategy"][0] = 7; })),
                 "plan.json: 'ops[1].strategy[0]' must be a string");
    expect_error(load(edited([](json &j) { j["ops"][2].erase("op"); })), "plan.json: missing field 'ops[2].op'");
    expect_error(load(edited([](json &j) { j["ops"] = json::object(); })), "plan.json: 'ops' must be a list");
    expect_error(load(edited([](json &j) { j["tensors"][0] = "fc1.w"; })), "plan.json: 'tensors[0]' must be an object");
    expect_error(load(edited([](json &j) { j["tensors"][0]["layout"][1] = "split(x)"; })),
                 "plan.json: 'tensors[0].layout[1]': bad layout 'split(x)'");
    expect_error(load(edited([](json &j) { j["tensors"][2]["shape"][0] = -32; })),
                 "plan.json: 'tensors[2].shape[0]' must not be negative");
    expect_error(load(edited([](json &j) { j["comm"][1]["kind"] = "broadcast"; })),
                 "plan.json: 'comm[1].kind': unknown communication kind 'broadcast'");
    expect_error(load(edited([](json &j) { j["machine"]["levels"][1]["count"] = 0; })),
                 "plan.json: 'machine.levels[1].count' must be an integer in [1, ");
    expect_error(load(edited([](json &j) { j["machine"]["levels"][0].erase("bandwidth"); })),
                 "plan.json: missing field 'machine.levels[0].bandwidth'");
    expect_error(load(edited([](json &j) { j["cuts"][1]["link"] = 2; })),
                 "plan.json: 'cuts[1].link' is 2 but the machine has 2 levels");
    expect_error(load(edited([](json &j) { j["memory"]["total"] = 1499; })),
                 "plan.json: 'memory.total' is 1499 but the categories sum to 1500");
    expect_error(load(edited([](json &j) { j["notes"] = "none"; })), "plan.json: 'notes' must be a list, got \"none\"");
    // The total is derived, so a plan without it still reads.
    EXPECT_EQ(plan_from_json(edited([](json &j) { j["memory"].erase("total"); }), "plan.json"), sample_plan());
}

// ---------------------------------------------------------------------------
// Renderers

TEST(PlanTable, ShowsHeaderMemoryOpsCommAndNotes) {
    std::string t = plan_table(sample_plan());
    EXPECT_TRUE(contains(t, "mlp:hidden=64,layers=2")) << t;
    EXPECT_TRUE(contains(t, "tofu"));
    EXPECT_TRUE(contains(t, "devices      4\n"));
    EXPECT_TRUE(contains(t, "machine      two boxes: 2 nodes x 2 gpus (4 devices)"));
    EXPECT_TRUE(contains(t, "2 over node, then 2 over gpu"));
    EXPECT_TRUE(contains(t, "11 ops -> 5 groups, 17 tensors -> 6 groups"));
    // 1,576,036 bytes = 1.503 MiB.
    EXPECT_TRUE(contains(t, "1.50 MiB per iteration (1,576,036 bytes; level 1 1.50 MiB, level 2 3.10 KiB)")) << t;
    EXPECT_TRUE(contains(t, "143 ms per iteration (predicted)"));
    EXPECT_TRUE(contains(t, "12.3 ms"));  // search time
    // Memory: categories and the total of 1,500 bytes; peak against one device.
    EXPECT_EQ(line_with(t, "optimizer state"), "optimizer state 300 B");
    EXPECT_EQ(line_with(t, "comm buffers"), "comm buffers 500 B");
    EXPECT_EQ(line_with(t, "  total "), "total 1.46 KiB");
    // By role: 784 x 64 floats whole, 392 x 32 on each device.
    EXPECT_EQ(line_with(t, "param "), "param 1 196 KiB 49.0 KiB");
    EXPECT_EQ(line_with(t, "activation  "), "activation 2 16.0 KiB 6.00 KiB");
    EXPECT_TRUE(contains(t, "peak 3.00 MiB per device, 12.0 MiB on one device (4.00x less)"));
    // One row per operator, a column per level.
    EXPECT_TRUE(contains(t, "level 1 (2-way over node)"));
    EXPECT_TRUE(contains(t, "level 2 (2-way over gpu)"));
    EXPECT_EQ(line_with(t, "fc1.grad  "), "fc1.grad matmul 0 replicate split m");
    EXPECT_EQ(line_with(t, "act<&> "), "act<&> relu 1 split m split n");
    EXPECT_TRUE(contains(t, "split k (partial sum)"));
    EXPECT_TRUE(contains(t, "split(0) | replicated"));
    // Communication summed by kind, and the total.
    EXPECT_TRUE(contains(t, "communication (3 steps, 1.50 MiB, 143 ms)"));
    EXPECT_TRUE(contains(t, "all-reduce"));
    EXPECT_EQ(line_with(t, "input 0: split(1)"),
              "2 all-gather act<&> fc1 input 0: split(1) -> replicated 3.00 KiB 2.00 us");
    EXPECT_EQ(line_with(t, " halo "), "2 halo 1 100 B 0 s");
    EXPECT_EQ(line_with(t, "fc1.w   param"), "fc1.w param f32 [784, 64] split(0) | split(1) [392, 32] 49.0 KiB");
    EXPECT_TRUE(contains(t, "- fc1.b: no dimension of [10] divides 4 ways; replicated"));
    EXPECT_TRUE(contains(t, "- second note"));
}

// "w1024": prefix and number. Built by append: GCC 12 warns falsely
// (-Wrestrict) about "w" + std::to_string(n) here.
std::string label(const char *prefix, int64_t n, const char *suffix = "") {
    std::string s = prefix;
    s.append(std::to_string(n)).append(suffix);
    return s;
}

TEST(PlanTable, ListsTheTwentyLargestStepsFirst) {
    Plan p = sample_plan();
    p.comm.clear();
    int64_t total = 0;
    for (int i = 0; i < 25; i++) {
        // Bytes 1000 + 37 i mod 25 spreads the sizes out of plan order.
        int64_t bytes = 1000 + (37 * i % 25);
        total += bytes;
        p.comm.push_back(CommStep{0, CommKind::AllGather, label("n", i), "x", label("w", bytes),
                                  bytes, 0});
    }
    std::string t = plan_table(p);
    EXPECT_TRUE(contains(t, "largest communication steps (top 20 of 25)")) << t;
    std::string steps = t.substr(t.find("largest communication steps"));
    // The 20 largest are 1005..1024: those are listed, in descending order;
    // 1000..1004 are not.
    size_t last = 0;
    for (int b = 1024; b >= 1005; b--) {
        size_t at = steps.find(label(" w", b, " "));
        ASSERT_NE(at, std::string::npos) << b;
        EXPECT_GT(at, last) << b;
        last = at;
    }
    for (int b = 1000; b < 1005; b++) EXPECT_FALSE(contains(steps, label(" w", b, " "))) << b;
    EXPECT_EQ(total, 25 * 1000 + 300);
    EXPECT_TRUE(contains(steps, "total  24.7 KiB")) << steps;  // 25,300 bytes
}

TEST(PlanDot, DrawsOperatorsTensorsAndCommunication) {
    Plan p = sample_plan();
    p.ops[0].node = "fc\"1";  // quotes must be escaped
    p.tensors[1].tensor = "fc\"1";
    p.comm[1].tensor = "fc\"1";
    p.comm[2].node = "fc\"1";
    p.ops[0].outputs = {"fc\"1"};
    p.ops[1].inputs = {"fc\"1"};
    std::string d = plan_dot(p);
    EXPECT_EQ(d.rfind("digraph plan {", 0), 0u) << d;
    EXPECT_EQ(d.back(), '\n');
    EXPECT_TRUE(contains(d, "fc\\\"1\\nmatmul\\nsplit m | split k (partial sum)")) << d;
    EXPECT_FALSE(contains(d, "\"fc\"1"));
    // fc1 and fc1.grad share op group 0: one cluster.
    EXPECT_EQ(count(d, "subgraph cluster_g"), 1);
    EXPECT_TRUE(contains(d, "subgraph cluster_g0"));
    // The producer edge carries the tensor's layout; communication is red.
    EXPECT_TRUE(contains(d, "op0 -> t1 [label=\"split(0) | replicated\"]")) << d;
    EXPECT_EQ(count(d, "penwidth=2.5"), 3);
    EXPECT_TRUE(contains(d, "all-reduce 1.50 MiB"));
    EXPECT_TRUE(contains(d, "t1 -> op1 [color=red"));  // an input converted for act<&>
    EXPECT_TRUE(contains(d, "op2 -> t0 [color=red"));  // fc1.grad's partial sums reduced
    EXPECT_TRUE(contains(d, "t0 -> op0 [color=red"));
    // Operators with the same strategies get the same colour; three distinct here.
    EXPECT_EQ(count(d, "    legend"), 3);
}

TEST(PlanHtml, IsOneEscapedSelfContainedPage) {
    Plan p = sample_plan();
    p.notes.push_back("a <script>alert('x')</script> & more");
    std::string h = plan_html(p);
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_TRUE(contains(h, "</html>"));
    EXPECT_TRUE(contains(h, "<style>"));
    EXPECT_FALSE(contains(h, "<script"));
    EXPECT_FALSE(contains(h, "http"));
    EXPECT_FALSE(contains(h, "act<&>"));
    EXPECT_TRUE(contains(h, "act&lt;&amp;&gt;"));
    EXPECT_TRUE(contains(h, "a &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"));
    EXPECT_TRUE(contains(h, "1,576,036 bytes per iteration"));
    EXPECT_TRUE(contains(h, "split k (partial sum)"));
    EXPECT_TRUE(contains(h, "fc1.b: no dimension of [10] divides 4 ways; replicated"));
    EXPECT_TRUE(contains(h, "optimizer state"));
    // The memory bars scale to the largest value shown: the one-device peak.
    EXPECT_TRUE(contains(h, "class=\"bar one\" style=\"width:100.00%\""));
    EXPECT_TRUE(contains(h, "class=\"bar peak\" style=\"width:25.00%\""));
}

TEST(Compare, TableAndJsonRowPerPlan) {
    Plan tofu = sample_plan(), data = sample_plan();
    data.strategy = "data";
    data.comm_bytes = 4 * tofu.comm_bytes;
    data.memory.weights = 4000;
    std::string t = compare_table({tofu, data});
    EXPECT_TRUE(contains(t, "mlp:hidden=64,layers=2 on 2 nodes x 2 gpus (4 devices)")) << t;
    EXPECT_TRUE(contains(t, "vs tofu"));
    EXPECT_EQ(line_with(t, "data "),
              "data 6.01 MiB 4.00x - 143 ms 3.91 KiB 200 B 300 B 400 B 500 B 5.27 KiB 3.00 MiB 12.3 ms");
    // A plan made to run shows the lowered total (the ranks' sum) beside the estimate.
    Plan ran = data;
    ran.executable = true;
    ran.rank_comm_bytes = {1000000, 1048576, 1048576};
    EXPECT_EQ(line_with(compare_table({tofu, ran}), "data "),
              "data 6.01 MiB 4.00x 2.95 MiB 143 ms 3.91 KiB 200 B 300 B 400 B 500 B 5.27 KiB 3.00 MiB 12.3 ms");
    EXPECT_EQ(json::parse(compare_json({tofu, ran}))["plans"][1]["lowered_comm_bytes"], 3097152);

    json j = json::parse(compare_json({tofu, data}));
    EXPECT_EQ(j["format"], "tessera-compare");
    ASSERT_EQ(j["plans"].size(), 2u);
    EXPECT_EQ(j["plans"][0]["strategy"], "tofu");
    EXPECT_EQ(j["plans"][1]["comm_bytes"], data.comm_bytes);
    EXPECT_EQ(j["plans"][0]["comm_ratio"], 1.0);
    EXPECT_EQ(j["plans"][1]["comm_ratio"], 4.0);
    EXPECT_EQ(j["plans"][1]["memory"]["total"], 4000 + 200 + 300 + 400 + 500);
    EXPECT_EQ(j["plans"][1]["per_device_peak_bytes"], data.per_device_peak_bytes);
    EXPECT_EQ(j["plans"][0]["search_time_s"], tofu.search_time_s);
    EXPECT_TRUE(j["plans"][1]["lowered_comm_bytes"].is_null());

    // Against a first plan that moves nothing, the ratio is undefined, not inf.
    tofu.comm_bytes = 0;
    j = json::parse(compare_json({tofu, data, tofu}));
    EXPECT_TRUE(j["plans"][1]["comm_ratio"].is_null());
    EXPECT_EQ(j["plans"][2]["comm_ratio"], 1.0);
    EXPECT_TRUE(contains(compare_table({tofu, data}), "n/a"));
}

}  // namespace
}  // namespace tessera
