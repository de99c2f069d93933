// Model specs (--model mlp:hidden=64,layers=3): parse_model_spec, its
// canonical text, and the model it builds, forward and training graph. The
// zoo bounds every model to 50,000 forward operators; under the sanitizers the
// largest take up to 20 s with their training graphs, beyond the fuzzer's
// time limit, so the training graph is built for the smaller ones only.
#include "fuzz_common.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"

namespace {

constexpr int64_t kMaxTrainingNodes = 5000;

// The canonical text of a spec must parse back to the same spec.
void expect_spec_round_trip(const tessera::ModelSpec &spec) {
    if (tessera::parse_model_spec(tessera::model_spec_str(spec)) == spec) return;
    std::fprintf(stderr, "finding: '%s' does not parse back to its spec\n", tessera::model_spec_str(spec).c_str());
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tessera::fuzz::expect_only_user_errors([&] {
        const std::string text = tessera::fuzz::text_of(data, size);
        const tessera::ModelSpec spec = tessera::parse_model_spec(text);
        expect_spec_round_trip(spec);
        (void)tessera::canonical_model_spec(text);
        tessera::Model m = tessera::build_model(spec, 2);
        if (m.graph.num_nodes() <= kMaxTrainingNodes)
            tessera::make_training_graph(m.graph, m.loss, tessera::OptimizerConfig{});
    });
    return 0;
}
