// Fashion-MNIST from the IDX files that Debian's dataset-fashion-mnist ships.
//
// IDX is big-endian: a 4-byte magic (0x0000 0x08 <rank>: 2049 for the rank-1 label
// file, 2051 for the rank-3 image file), one 4-byte extent per dimension, then the
// unsigned bytes row-major. We decompress each file whole with zlib and check every
// field before trusting it, since a truncated download looks like a short file.
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "tessera/error.h"
#include "tessera/models/data.h"

namespace tessera {
namespace {

constexpr uint32_t kLabelMagic = 2049;
constexpr uint32_t kImageMagic = 2051;
constexpr int64_t kRows = 28, kCols = 28, kClasses = 10;

std::string missing_hint() {
    return "; install the Debian package dataset-fashion-mnist (it puts the files in " +
           std::string(kFashionMnistDefaultDir) + ") or pass --data-dir DIR";
}

struct GzCloser {
    void operator()(gzFile_s *f) const { gzclose(f); }
};

// The whole decompressed content of a gzip file (zlib reads a plain file as is).
std::vector<uint8_t> read_gz(const std::string &path) {
    std::error_code ec;
    TESSERA_CHECK(std::filesystem::is_regular_file(path, ec),
                  "Fashion-MNIST file '", path, "' not found", missing_hint());
    std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
    TESSERA_CHECK(f != nullptr, "cannot open Fashion-MNIST file '", path, "': ",
                  std::strerror(errno));
    std::vector<uint8_t> out;
    std::array<uint8_t, 1 << 16> chunk;
    for (;;) {
        const int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
        if (n < 0) {
            int code = 0;
            const char *msg = gzerror(f.get(), &code);
            fail("Fashion-MNIST file '", path, "' is corrupt (zlib: ", msg,
                 "); reinstall dataset-fashion-mnist");
        }
        if (n == 0) break;
        out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    }
    // A gzip stream cut short reads as a clean end of file in some zlib versions and
    // sets the error only here.
    int code = 0;
    const char *msg = gzerror(f.get(), &code);
    TESSERA_CHECK(code == Z_OK || code == Z_STREAM_END, "Fashion-MNIST file '", path,
                  "' is corrupt or truncated (zlib: ", msg, "); reinstall dataset-fashion-mnist");
    return out;
}

uint32_t be32(const std::vector<uint8_t> &b, size_t at) {
    return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) |
           uint32_t(b[at + 3]);
}

// Checks the magic and returns the extents of an IDX file of `rank` dimensions; the
// payload starts at 4 + 4 * rank.
std::vector<int64_t> idx_header(const std::vector<uint8_t> &b, const std::string &path,
                                uint32_t magic, int rank, const char *what) {
    const size_t header = 4 + 4 * static_cast<size_t>(rank);
    TESSERA_CHECK(b.size() >= header, "Fashion-MNIST file '", path, "' is truncated: it holds ",
                  b.size(), " bytes, fewer than the ", header, "-byte IDX header of ", what);
    const uint32_t got = be32(b, 0);
    TESSERA_CHECK(got == magic, "Fashion-MNIST file '", path, "' has IDX magic number ", got,
                  " but ", what, " must have ", magic, "; is it the right file?");
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; d++) dims.push_back(be32(b, 4 + 4 * d));
    return dims;
}

void check_payload(const std::vector<uint8_t> &b, const std::string &path, size_t header,
                   int64_t expected, const std::string &what) {
    const int64_t have = static_cast<int64_t>(b.size() - header);
    TESSERA_CHECK(have >= expected, "Fashion-MNIST file '", path, "' is truncated: its header says ",
                  what, " (", expected, " bytes) but only ", have, " bytes follow");
    TESSERA_CHECK(have == expected, "Fashion-MNIST file '", path, "' has ", have - expected,
                  " bytes after the ", what, " its header announces");
}

}  // namespace

Dataset load_fashion_mnist(const std::string &dir, bool train) {
    std::error_code ec;
    TESSERA_CHECK(std::filesystem::is_directory(dir, ec), "Fashion-MNIST directory '", dir,
                  "' does not exist", missing_hint());
    const std::string prefix = train ? "train" : "t10k";
    const std::string image_path = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
    const std::string label_path = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();

    const std::vector<uint8_t> images = read_gz(image_path);
    const std::vector<int64_t> idims = idx_header(images, image_path, kImageMagic, 3, "an image file");
    TESSERA_CHECK(idims[1] == kRows && idims[2] == kCols, "Fashion-MNIST file '", image_path,
                  "' holds images of ", idims[1], "x", idims[2], " pixels; Fashion-MNIST's are ",
                  kRows, "x", kCols);
    const int64_t count = idims[0];
    check_payload(images, image_path, 16, count * kRows * kCols,
                  std::to_string(count) + " images of 28x28");

    const std::vector<uint8_t> labels = read_gz(label_path);
    const std::vector<int64_t> ldims = idx_header(labels, label_path, kLabelMagic, 1, "a label file");
    TESSERA_CHECK(ldims[0] == count, "Fashion-MNIST label file '", label_path, "' holds ", ldims[0],
                  " labels but image file '", image_path, "' holds ", count,
                  " images; the two must come from the same split");
    check_payload(labels, label_path, 8, count, std::to_string(count) + " labels");

    Dataset d;
    d.name = "fashion-mnist";
    d.sample_shape = {kRows * kCols};
    d.dtype = DType::F32;
    d.size = count;
    d.num_classes = kClasses;
    d.label_elements = 1;
    d.labels.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; i++) {
        const uint8_t l = labels[8 + i];
        TESSERA_CHECK(l < kClasses, "Fashion-MNIST file '", label_path, "' has label ", int(l),
                      " for sample ", i, "; labels must lie in [0, ", kClasses, ")");
        d.labels[i] = l;
    }
    // A pixel has only 256 possible values: normalise each once.
    std::array<float, 256> value;
    for (int p = 0; p < 256; p++)
        value[p] = (static_cast<float>(p) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
    d.x_f32.resize(static_cast<size_t>(count * kRows * kCols));
    const uint8_t *src = images.data() + 16;
    for (size_t i = 0; i < d.x_f32.size(); i++) d.x_f32[i] = value[src[i]];
    return d;
}

}  // namespace tessera
