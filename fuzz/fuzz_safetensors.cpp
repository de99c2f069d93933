// Checkpoints and weights (--resume, safetensors files): read_safetensors.
#include "fuzz_common.h"
#include "tessera/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string path = tessera::fuzz::write_temp(data, size, ".safetensors");
    tessera::fuzz::expect_only_user_errors([&] { (void)tessera::read_safetensors(path); });
    return 0;
}
