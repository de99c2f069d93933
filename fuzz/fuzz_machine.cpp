// Machine files (tessera-plan --machine, tessera-train --machine).
#include "fuzz_common.h"
#include "tessera/partition/machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tessera::fuzz::expect_only_user_errors([&] {
        tessera::Machine m = tessera::machine_from_json_text(tessera::fuzz::text_of(data, size), "machine.json");
        (void)tessera::machine_str(m);
        (void)tessera::machine_cuts(m);
    });
    return 0;
}
