// safetensors: round trips, the exact bytes of a small file written out by hand, an
// independent Python reader (safetensors_check.py, next to this file), every reader
// error on hand-made files, and the atomic write.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "expect_error.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/error.h"
#include "tessera/half.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using test::expect_error;

std::string slurp(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
}

void spit(const fs::path &p, const std::string &bytes) {
    std::ofstream out(p, std::ios::binary);
    out << bytes;
}

std::vector<std::string> listing(const fs::path &dir) {
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

class Safetensors : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("tessera_st_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string &name) const { return (dir_ / name).string(); }

    fs::path dir_;
};

StTensor raw(std::string name, StDType t, Shape shape, std::vector<uint8_t> bytes) {
    StTensor s;
    s.name = std::move(name);
    s.dtype = t;
    s.shape = std::move(shape);
    for (uint8_t b : bytes) s.data.push_back(std::byte(b));
    return s;
}

// ---- Writing and reading back --------------------------------------------------------

TEST_F(Safetensors, RoundTrip) {
    std::vector<float> w(6 * 5);
    for (size_t i = 0; i < w.size(); i++) w[i] = 0.37f * float(i) - 4.0f;
    std::vector<int64_t> step{123456789012345ll};
    std::vector<uint8_t> mask{1, 0, 255};
    std::vector<StTensor> tensors{
        StTensor::f32("layer1.weight", {6, 5}, w),
        StTensor::i32("labels", {4}, {3, -1, 7, 2147483647}),
        StTensor::f32("scalar", {}, {2.5f}),
        StTensor::f32("empty", {0, 3}, {}),
        raw("mask", StDType::U8, {3}, mask),
        StTensor{"adam.step", StDType::I64, {1}, {}},
    };
    tensors.back().data.resize(8);
    std::memcpy(tensors.back().data.data(), step.data(), 8);
    const std::map<std::string, std::string> meta{
        {"format", "pt"}, {"model", "mlp \"784-10\"\\ \n\ttab é"}, {"step", "42"}};
    write_safetensors(file("ck.safetensors"), tensors, meta);

    const StFile f = read_safetensors(file("ck.safetensors"));
    EXPECT_EQ(f.path, file("ck.safetensors"));
    EXPECT_EQ(f.metadata, meta);
    ASSERT_EQ(f.tensors.size(), tensors.size());
    for (const StTensor &t : tensors) {
        ASSERT_TRUE(f.has(t.name)) << t.name;
        EXPECT_EQ(f.get(t.name), t) << t.name;
    }
    // Sorted by name.
    for (size_t i = 1; i < f.tensors.size(); i++) EXPECT_LT(f.tensors[i - 1].name, f.tensors[i].name);
    EXPECT_EQ(f.get("layer1.weight", DType::F32, {6, 5}).to_f32(), w);
    EXPECT_EQ(f.get("labels", DType::I32, {4}).to_i32(), (std::vector<int32_t>{3, -1, 7, 2147483647}));
    EXPECT_FALSE(f.has("missing"));

    // No metadata and no tensors is a valid file too.
    write_safetensors(file("empty.safetensors"), {}, {});
    const StFile e = read_safetensors(file("empty.safetensors"));
    EXPECT_TRUE(e.tensors.empty());
    EXPECT_TRUE(e.metadata.empty());
    EXPECT_EQ(slurp(file("empty.safetensors")), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

// --export-dtype bf16: F32 tensors narrowed as base/half.h rounds, the rest
// untouched, and the file reads back with its 16-bit dtypes.
TEST_F(Safetensors, NarrowedTensorsRoundTrip) {
    const std::vector<float> w = {1.0f, -2.5f, 3.14159f, 1e-3f, 65520.0f, -0.0f};
    const StTensor labels = StTensor::i32("labels", {2}, {7, -1});
    std::vector<StTensor> tensors{narrowed(StTensor::f32("w", {2, 3}, w), DType::BF16),
                                  narrowed(StTensor::f32("h", {6}, w), DType::F16), narrowed(labels, DType::BF16)};
    EXPECT_EQ(tensors[2], labels);
    for (DType t : {DType::BF16, DType::F16}) {
        const StTensor &n = tensors[t == DType::BF16 ? 0 : 1];
        ASSERT_EQ(n.dtype, to_st_dtype(t));
        ASSERT_EQ(n.data.size(), w.size() * 2);
        for (size_t k = 0; k < w.size(); k++) {
            uint16_t h;
            std::memcpy(&h, n.data.data() + 2 * k, 2);
            EXPECT_EQ(h, t == DType::BF16 ? bf16_from_float(w[k]) : f16_from_float(w[k])) << k;
        }
    }
    write_safetensors(file("half.safetensors"), tensors, {});
    const StFile f = read_safetensors(file("half.safetensors"));
    for (const StTensor &t : tensors) EXPECT_EQ(f.get(t.name), t) << t.name;
    EXPECT_EQ(f.get("w", DType::BF16, {2, 3}), tensors[0]);
}

TEST_F(Safetensors, ExactBytes) {
    write_safetensors(file("t.safetensors"),
                      {raw("u", StDType::U8, {3}, {1, 2, 3}), StTensor::i32("n", {1}, {7}),
                       StTensor::f32("a", {2}, {1.0f, -2.0f})},
                      {{"format", "pt"}});
    // Tensors go by element size, then name: a, n (4 bytes), u (1 byte). The JSON is
    // 193 bytes, padded with 7 spaces to 200 = 0xc8.
    const std::string json =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"n\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]},"
        "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[12,15]}}       ";
    ASSERT_EQ(json.size(), 200u);
    std::string expected("\xc8\0\0\0\0\0\0\0", 8);
    expected += json;
    expected += std::string("\x00\x00\x80\x3f" "\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f
    expected += std::string("\x07\x00\x00\x00", 4);                    // 7
    expected += std::string("\x01\x02\x03", 3);
    EXPECT_EQ(slurp(file("t.safetensors")), expected);
}

// ---- The independent Python reader -------------------------------------------------

std::string checker() { return TESSERA_SAFETENSORS_CHECK; }

int run_checker(const std::string &args, const fs::path &log) {
    const std::string cmd = "python3 '" + checker() + "' " + args + " > '" + log.string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST_F(Safetensors, PythonReaderAgrees) {
    if (std::system("python3 -c '' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
    ASSERT_TRUE(fs::exists(checker())) << checker();
    StTensor step{"step", StDType::I64, {}, std::vector<std::byte>(8)};
    step.data[0] = std::byte(5);
    step.data[1] = std::byte(1);  // 261
    write_safetensors(file("m.safetensors"),
                      {StTensor::f32("fc.w", {2, 3}, {0.5f, -1.25f, 3.0f, 0.1f, -0.0f, 1e-3f}),
                       StTensor::i32("fc.ids", {3}, {-7, 0, 123456}),
                       raw("mask", StDType::U8, {2, 2}, {0, 1, 254, 255}), step},
                      {{"format", "pt"}, {"note", "a \"quoted\" \\ value"}});
    const fs::path log = dir_ / "log.txt";
    const std::string good = "'" + file("m.safetensors") +
                             "' --count 4 --meta format=pt --meta 'note=a \"quoted\" \\ value'"
                             " --expect fc.w:F32:2x3:0.5,-1.25,3,0.1,-0.0,0.001"
                             " --expect fc.ids:I32:3:-7,0,123456"
                             " --expect mask:U8:2x2:0,1,254,255 --expect step:I64::261";
    EXPECT_EQ(run_checker(good, log), 0) << slurp(log);

    // The checker can fail: a wrong value, a wrong shape, a missing tensor each give 1.
    EXPECT_EQ(run_checker("'" + file("m.safetensors") + "' --expect fc.ids:I32:3:-7,0,123457", log), 1);
    EXPECT_NE(slurp(log).find("MISMATCH: fc.ids holds"), std::string::npos) << slurp(log);
    EXPECT_EQ(run_checker("'" + file("m.safetensors") + "' --expect fc.w:F32:3x2:0,0,0,0,0,0", log), 1);
    EXPECT_EQ(run_checker("'" + file("m.safetensors") + "' --expect nope:F32::1", log), 1);
    EXPECT_EQ(run_checker("'" + file("m.safetensors") + "' --count 3", log), 1);
    // ... and it rejects a file with a gap in the data, as our reader does.
    std::string bytes = slurp(file("m.safetensors"));
    bytes += "1234";
    spit(dir_ / "gap.safetensors", bytes);
    EXPECT_EQ(run_checker("'" + file("gap.safetensors") + "'", log), 2) << slurp(log);
    expect_error([&] { read_safetensors(file("gap.safetensors")); },
                 {"the data section has", "but the tensors cover only"});
}

// ---- Reader errors on hand-made files ------------------------------------------------

// A file with the given header text (padded to 8) and data bytes.
std::string make_file(std::string json, const std::string &data) {
    json.append((8 - json.size() % 8) % 8, ' ');
    std::string out;
    for (int i = 0; i < 8; i++) out += char(uint64_t(json.size()) >> (8 * i));
    return out + json + data;
}

class SafetensorsCorrupt : public Safetensors {
protected:
    // Writes the file and expects the reader to fail naming it and every part.
    void expect_bad(const std::string &bytes, std::vector<std::string> parts) {
        const std::string p = file("bad.safetensors");
        spit(p, bytes);
        parts.insert(parts.begin(), "safetensors file '" + p + "'");
        expect_error([&] { read_safetensors(p); }, parts);
    }
};

const std::string kA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kData8(8, '\x01');

TEST_F(SafetensorsCorrupt, HandMadeValidFileReads) {
    spit(file("ok.safetensors"), make_file("{" + kA + "}", kData8));
    const StFile f = read_safetensors(file("ok.safetensors"));
    ASSERT_EQ(f.tensors.size(), 1u);
    EXPECT_EQ(f.tensors[0].data.size(), 8u);
    // Whitespace in the JSON is fine, and padding need not be to 8 for reading.
    spit(file("ws.safetensors"), make_file("{ \n" + kA + " }", kData8));
    EXPECT_EQ(read_safetensors(file("ws.safetensors")).tensors.size(), 1u);
}

TEST_F(SafetensorsCorrupt, MissingFile) {
    expect_error([&] { read_safetensors(file("nope.safetensors")); },
                 {"cannot read the safetensors file '" + file("nope.safetensors") + "'",
                  "No such file or directory"});
    expect_error([&] { read_safetensors(dir_.string()); }, {"it is a directory, not a regular file"});
}

TEST_F(SafetensorsCorrupt, TooShort) { expect_bad("abc", {"the file is 3 bytes, too short"}); }

TEST_F(SafetensorsCorrupt, HeaderLengthPastEnd) {
    std::string f = make_file("{" + kA + "}", kData8);
    f[0] = char(0xff);
    f[1] = char(0x01);
    expect_bad(f, {"the header length 511 runs past the end of the file"});
    expect_bad(std::string("\x00\x00\x00\x00\x00\x00\x00\x80{}", 10), {"the header length", "runs past"});
}

TEST_F(SafetensorsCorrupt, NotJson) {
    expect_bad(make_file("[1, 2]", ""), {"does not start with '{'"});
    expect_bad(make_file("", ""), {"does not start with '{'"});
    expect_bad(make_file("{\"a\":", ""), {"the header: not valid JSON"});
    expect_bad(make_file("{" + kA + "} x", kData8), {"the header: not valid JSON"});
}

TEST_F(SafetensorsCorrupt, Duplicates) {
    const std::string b = R"("a":{"dtype":"F32","shape":[0],"data_offsets":[8,8]})";
    expect_bad(make_file("{" + kA + "," + b + "}", kData8), {"the header's entry 'a' appears twice"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}})", kData8),
               {"entry 'a' repeats the field 'dtype'"});
}

TEST_F(SafetensorsCorrupt, BadEntries) {
    expect_bad(make_file(R"({"a":[1]})", ""), {"entry 'a' must be an object"});
    expect_bad(make_file(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "12"),
               {"entry 'a' has dtype \"F8_E4M3\"", "supported: F32, I32, I64, U8, F64, BF16, F16"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", ""), {"entry 'a' has no 'data_offsets'"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", kData8),
               {"entry 'a' has an unknown field 'x'"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kData8),
               {"the shape of entry 'a' holds -2 where a non-negative integer belongs"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kData8),
               {"entry 'a' has shape 2, not a list"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}})", kData8),
               {"the data_offsets of entry 'a' holds 0.0 where a non-negative integer belongs"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kData8),
               {"entry 'a' has data_offsets [0], not [begin, end]"});
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", kData8),
               {"entry 'a' has data_offsets [8, 0] that end before they begin"});
    expect_bad(make_file(R"({"__metadata__":{"k":1}})", ""), {"__metadata__ entry 'k' must be a string, got 1"});
    expect_bad(make_file(R"({"__metadata__":"x"})", ""), {"__metadata__ must be an object"});
}

TEST_F(SafetensorsCorrupt, SpanMismatch) {
    expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x')),
               {"entry 'a' is F32[2, 3], which needs 24 bytes, but its data_offsets [0, 20] span 20"});
    // An extent product that overflows cannot match any span.
    expect_bad(make_file(R"({"a":{"dtype":"I64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", kData8),
               {"entry 'a' is I64[4294967296, 4294967296]", "span 8"});
}

TEST_F(SafetensorsCorrupt, OffsetsOutOfRange) {
    expect_bad(make_file("{" + kA + "}", "1234"),
               {"entry 'a' has data_offsets [0, 8] past the end of the data section (4 bytes)", "truncated"});
}

TEST_F(SafetensorsCorrupt, OverlapGapAndTrailing) {
    const std::string b12 = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})";
    expect_bad(make_file("{" + kA + "," + b12 + "}", std::string(12, 'x')),
               {"entries 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])"});
    const std::string a4 = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
    const std::string c = R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]})";
    expect_bad(make_file("{" + a4 + "," + c + "}", std::string(12, 'x')),
               {"bytes [4, 8) of the data section belong to no tensor (before entry 'c')"});
    expect_bad(make_file("{" + kA + "}", std::string(10, 'x')),
               {"the data section has 10 bytes but the tensors cover only 8"});
}

TEST_F(Safetensors, GetErrors) {
    write_safetensors(file("g.safetensors"), {StTensor::f32("w", {2, 2}, {1, 2, 3, 4})});
    const StFile f = read_safetensors(file("g.safetensors"));
    expect_error([&] { f.get("b"); }, {"safetensors file '" + file("g.safetensors") + "'",
                                       "no tensor 'b' (it holds 1 tensors: w)"});
    expect_error([&] { f.get("w", DType::F32, {4}); },
                 {"tensor 'w' is F32[2, 2] but F32[4] was expected"});
    expect_error([&] { f.get("w", DType::I32, {2, 2}); },
                 {"tensor 'w' is F32[2, 2] but I32[2, 2] was expected"});
}

// ---- Writer errors and atomicity -------------------------------------------------------

TEST_F(Safetensors, WriterRejectsBadTensors) {
    const std::string p = file("w.safetensors");
    const std::string prefix = "cannot write safetensors file '" + p + "': ";
    expect_error([&] { write_safetensors(p, {StTensor::f32("a", {1}, {1}), StTensor::f32("a", {1}, {2})}); },
                 {prefix + "tensor 'a' appears twice"});
    expect_error([&] { write_safetensors(p, {StTensor::f32("", {1}, {1})}); }, {prefix, "empty name"});
    expect_error([&] { write_safetensors(p, {StTensor::f32("__metadata__", {1}, {1})}); },
                 {prefix, "'__metadata__' is reserved"});
    StTensor short_data = StTensor::f32("s", {3}, {1, 2, 3});
    short_data.data.pop_back();
    expect_error([&] { write_safetensors(p, {short_data}); },
                 {prefix + "tensor 's' is F32[3], which needs 12 bytes, but holds 11"});
    expect_error([&] { write_safetensors(p, {raw("n", StDType::U8, {-1}, {})}); },
                 {prefix + "tensor 'n' has a negative extent in shape [-1]"});
    expect_error([&] { write_safetensors(p, {StTensor::f32("bad\xff", {1}, {1})}); },
                 {prefix, "is not valid UTF-8"});
    EXPECT_TRUE(listing(dir_).empty()) << "a failed write left files behind";
}

TEST_F(Safetensors, WriteIsAtomic) {
    // A missing directory: a clear error, and nothing is created.
    const fs::path missing = dir_ / "no" / "such" / "dir";
    const std::string bad_path = (missing / "ck.safetensors").string();
    expect_error([&] { write_safetensors(bad_path, {StTensor::f32("a", {1}, {1})}); },
                 {"cannot write safetensors file '" + bad_path + "'", "No such file or directory"});
    EXPECT_FALSE(fs::exists(dir_ / "no"));
    EXPECT_TRUE(listing(dir_).empty());

    // Success leaves exactly the file; overwriting replaces it whole.
    const std::string p = file("ck.safetensors");
    write_safetensors(p, {StTensor::f32("a", {1}, {1})}, {{"step", "1"}});
    EXPECT_EQ(listing(dir_), std::vector<std::string>{"ck.safetensors"});
    write_safetensors(p, {StTensor::f32("a", {2}, {5, 6}), StTensor::i32("b", {1}, {3})}, {{"step", "2"}});
    EXPECT_EQ(listing(dir_), std::vector<std::string>{"ck.safetensors"});
    const StFile f = read_safetensors(p);
    EXPECT_EQ(f.metadata.at("step"), "2");
    EXPECT_EQ(f.get("a").to_f32(), (std::vector<float>{5, 6}));

    // A write that fails validation leaves the previous file untouched.
    const std::string before = slurp(p);
    StTensor broken = StTensor::f32("c", {2}, {1, 2});
    broken.data.resize(3);
    EXPECT_THROW(write_safetensors(p, {broken}), Error);
    EXPECT_EQ(slurp(p), before);

    // A directory is refused before any temporary file is made, and left as it was.
    fs::create_directories(dir_ / "taken");
    spit(dir_ / "taken" / "x", "x");
    const std::string onto_dir = (dir_ / "taken").string();
    expect_error([&] { write_safetensors(onto_dir, {StTensor::f32("a", {1}, {1})}); },
                 {"cannot write safetensors file '" + onto_dir + "'", "it is a directory"});
    EXPECT_EQ(listing(dir_), (std::vector<std::string>{"ck.safetensors", "taken"}));
    EXPECT_EQ(listing(dir_ / "taken"), std::vector<std::string>{"x"});
    EXPECT_EQ(slurp(p), before);
}

TEST_F(Safetensors, RelativePath) {
    // A bare file name writes into the working directory (the temp file goes there too).
    const fs::path cwd = fs::current_path();
    fs::current_path(dir_);
    write_safetensors("rel.safetensors", {StTensor::i32("a", {2}, {1, 2})});
    const StFile f = read_safetensors("rel.safetensors");
    fs::current_path(cwd);
    EXPECT_EQ(f.get("a").to_i32(), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(listing(dir_), std::vector<std::string>{"rel.safetensors"});
}

}  // namespace
}  // namespace tessera
