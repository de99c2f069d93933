// Fashion-MNIST's gzip'd IDX files (--data fashion-mnist --data-dir): the
// input's first two bytes (little-endian) are the images file's length; its
// next bytes are the images file, the rest the labels file, each gzip'd into
// a directory of this process.
#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "fuzz_common.h"
#include "tessera/models/data.h"

namespace {

void write_gz(const std::string &path, const uint8_t *data, size_t size) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size && gzwrite(f, data, static_cast<unsigned>(size)) != static_cast<int>(size)) std::abort();
    gzclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::string dir = "/tmp/tessera-fuzz-idx-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    if (size < 2) return 0;
    const size_t images = std::min<size_t>(data[0] | (size_t{data[1]} << 8), size - 2);
    write_gz(dir + "/t10k-images-idx3-ubyte.gz", data + 2, images);
    write_gz(dir + "/t10k-labels-idx1-ubyte.gz", data + 2 + images, size - 2 - images);
    tessera::fuzz::expect_only_user_errors([&] { (void)tessera::load_fashion_mnist(dir, false); });
    return 0;
}
