// Plan files (tessera-train --plan): plan_from_json, and back.
#include "fuzz_common.h"
#include "tessera/partition/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tessera::fuzz::expect_only_user_errors([&] {
        tessera::Plan p = tessera::plan_from_json(tessera::fuzz::text_of(data, size), "plan.json");
        (void)tessera::plan_to_json(p);
    });
    return 0;
}
