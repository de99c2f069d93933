#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/graph/serialize.h"

namespace tessera {
namespace {

Graph small_training_graph(OptimizerConfig::Kind kind) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {4, 1, 6, 6});
    Tensor h = b.relu(b.batch_norm_layer(b.conv(x, 2, 3)));
    h = b.reshape(b.max_pool2d(h, 2), {4, 18});
    Tensor logits = b.linear(h, 5, true, Builder::WeightInit::Xavier);
    Tensor loss = b.softmax_xent(logits, b.data("labels", {4}, DType::I32));
    g.set_output("loss", loss.id);
    g.set_output("logits", logits.id);
    OptimizerConfig cfg;
    cfg.kind = kind;
    cfg.lr = 0.125;
    cfg.weight_decay = 1e-4;
    make_training_graph(g, loss.id, cfg);
    return g;
}

TEST(Serialize, RoundTripIsExact) {
    for (auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        Graph g = small_training_graph(kind);
        nlohmann::json j = graph_to_json(g);
        Graph back = graph_from_json(nlohmann::json::parse(j.dump()));
        EXPECT_TRUE(back == g);
        EXPECT_EQ(graph_to_json(back), j);
    }
}

TEST(Serialize, SaveAndLoadFile) {
    Graph g = small_training_graph(OptimizerConfig::Kind::Sgd);
    auto dir = std::filesystem::temp_directory_path() / "tessera_serialize_test";
    std::filesystem::create_directories(dir);
    std::string path = (dir / "g.json").string();
    save_graph(g, path);
    EXPECT_TRUE(load_graph(path) == g);
    for (const auto &e : std::filesystem::directory_iterator(dir))
        EXPECT_EQ(e.path().filename(), "g.json") << "temporary file left behind";
    std::filesystem::remove_all(dir);
}

using test::expect_error;

TEST(Serialize, BadInputErrors) {
    auto dir = std::filesystem::temp_directory_path() / "tessera_serialize_errors";
    std::filesystem::create_directories(dir);
    auto write = [&](const std::string &name, const std::string &text) {
        std::string p = (dir / name).string();
        std::ofstream(p) << text;
        return p;
    };
    expect_error([&] { load_graph((dir / "missing.json").string()); }, "cannot read the graph file");
    std::string bad = write("bad.json", "{not json");
    expect_error([&] { load_graph(bad); }, "not valid JSON");
    std::string other = write("other.json", R"({"format": "onnx"})");
    expect_error([&] { load_graph(other); }, "not a Tessera graph");

    nlohmann::json j = graph_to_json(small_training_graph(OptimizerConfig::Kind::Sgd));
    nlohmann::json wrong_shape = j;
    wrong_shape["nodes"][0]["outputs"][0]["shape"] = {1, 2, 3};
    expect_error([&] { graph_from_json(wrong_shape, "g.json"); }, "is recorded with shape [1, 2, 3]");
    nlohmann::json unknown_op = j;
    unknown_op["nodes"][0]["op"] = "conv3d";
    expect_error([&] { graph_from_json(unknown_op, "g.json"); }, "conv3d");
    nlohmann::json dangling = j;
    dangling["nodes"][0]["inputs"][0] = "ghost";
    expect_error([&] { graph_from_json(dangling, "g.json"); }, "unknown tensor 'ghost'");
    nlohmann::json bad_dtype = j;
    bad_dtype["tensors"][0]["dtype"] = "f8";
    expect_error([&] { graph_from_json(bad_dtype, "g.json"); }, "unknown dtype 'f8'");
    nlohmann::json missing = j;
    missing["tensors"][0].erase("shape");
    expect_error([&] { graph_from_json(missing, "g.json"); }, "missing field 'shape'");

    // A failed save leaves nothing behind.
    expect_error([&] { save_graph(small_training_graph(OptimizerConfig::Kind::Sgd), (dir / "no/such/dir/g.json").string()); },
                 "cannot write the graph");
    std::filesystem::remove_all(dir);
}

// The index of the first node for which `pick` holds.
size_t node_where(const nlohmann::json &j, const std::function<bool(const nlohmann::json &)> &pick) {
    for (size_t i = 0; i < j["nodes"].size(); i++)
        if (pick(j["nodes"][i])) return i;
    ADD_FAILURE() << "no such node";
    return 0;
}

// The links between tensors and nodes (updates, forward, grad_of) are the
// file's to get right: a wrong one is the user's error, not an internal one
// (fuzz_graph_json found "in-place update changes the type" asserted).
TEST(Serialize, BadLinksAreUserErrors) {
    const nlohmann::json j = graph_to_json(small_training_graph(OptimizerConfig::Kind::Sgd));
    const size_t update = node_where(j, [](const nlohmann::json &n) { return n["optimizer"].get<bool>(); });
    const size_t backward = node_where(j, [](const nlohmann::json &n) { return n.contains("forward"); });
    const size_t first_grad = node_where(j, [](const nlohmann::json &n) {
        return n.contains("grad_of") && !n["grad_of"][0].is_null();
    });

    nlohmann::json wrong_type = j;
    const nlohmann::json &target = j["nodes"][update]["outputs"][0];
    for (const nlohmann::json &t : j["tensors"])
        if (t["role"] == "param" && t["shape"] != target["shape"]) wrong_type["nodes"][update]["updates"][0] = t["name"];
    expect_error([&] { graph_from_json(wrong_type, "g.json"); }, "an update keeps the type");
    nlohmann::json not_persistent = j;
    not_persistent["nodes"][update]["updates"][0] = "x";
    expect_error([&] { graph_from_json(not_persistent, "g.json"); }, "only parameters and optimizer state");
    nlohmann::json own_forward = j;
    own_forward["nodes"][backward]["forward"] = j["nodes"][backward]["name"];
    expect_error([&] { graph_from_json(own_forward, "g.json"); }, "it must come before the node");
    nlohmann::json wrong_shape = j;
    wrong_shape["nodes"][first_grad]["grad_of"][0] = "labels";
    expect_error([&] { graph_from_json(wrong_shape, "g.json"); }, "does not have the shape of 'labels'");
    nlohmann::json own_grad = j;
    own_grad["tensors"][0]["grad_of"] = j["tensors"][0]["name"];
    expect_error([&] { graph_from_json(own_grad, "g.json"); }, "which must come before it");
}

}  // namespace
}  // namespace tessera
