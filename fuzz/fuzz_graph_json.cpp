// Graph files (load_graph): the JSON form of a dataflow graph, rebuilt node by
// node through shape inference, and the attributes of its communication nodes
// as the executor reads them. A graph the reader accepts must also write out
// and read back as the same graph.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/graph/serialize.h"

namespace {

void read_comm_nodes(const tessera::Graph &g) {
    for (const tessera::Node &n : g.nodes())
        if (n.comm) (void)tessera::read_comm_attrs(n.call, g.tensor(n.outputs.at(0)).type.rank());
}

void expect_round_trip(const tessera::Graph &g) {
    const nlohmann::json once = tessera::graph_to_json(g);
    try {
        const nlohmann::json twice = tessera::graph_to_json(tessera::graph_from_json(once, "written graph"));
        if (twice == once) return;
        std::fprintf(stderr, "finding: the graph reads back different\n");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "finding: a graph that was read does not read back: %s\n", e.what());
    }
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string path = tessera::fuzz::write_temp(data, size, ".graph.json");
    tessera::fuzz::expect_only_user_errors([&] {
        const tessera::Graph g = tessera::load_graph(path);
        expect_round_trip(g);
        read_comm_nodes(g);
    });
    return 0;
}
