// Size strings (--device-mem 1.5GiB, budgets): parse_size.
#include "fuzz_common.h"
#include "tessera/size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tessera::fuzz::expect_only_user_errors(
        [&] { (void)tessera::parse_size(tessera::fuzz::text_of(data, size), "--device-mem"); });
    return 0;
}
