// Every JSON file Tessera reads goes through parse_json_input first (plans,
// graphs, machines, programs, safetensors headers, checkpoint metadata).
#include "fuzz_common.h"
#include "tessera/json_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tessera::fuzz::expect_only_user_errors([&] {
        nlohmann::json j = tessera::parse_json_input(tessera::fuzz::text_of(data, size), "input");
        (void)tessera::json_preview(j);
    });
    return 0;
}
