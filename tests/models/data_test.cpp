// Datasets: Fashion-MNIST against a raw decode written here, every loader error on
// small hand-made files, the batcher's permutations by brute force, and synthetic
// data against its rules recomputed here.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/models/data.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using test::expect_error;

// ---- Raw IDX reading, independent of the loader ------------------------------------

std::vector<uint8_t> gunzip(const std::string &path) {
    gzFile f = gzopen(path.c_str(), "rb");
    EXPECT_NE(f, nullptr) << path;
    std::vector<uint8_t> out;
    if (!f) return out;
    uint8_t buf[4096];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
    gzclose(f);
    return out;
}

float normalised(uint8_t p) { return (p / 255.0f - 0.2860f) / 0.3530f; }

class FashionMnistReal : public ::testing::TestWithParam<bool> {};

TEST_P(FashionMnistReal, MatchesRawDecode) {
    const bool train = GetParam();
    const std::string dir = kFashionMnistDefaultDir;
    if (!fs::exists(fs::path(dir) / "t10k-labels-idx1-ubyte.gz"))
        GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
    const Dataset d = load_fashion_mnist(dir, train);
    const int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(d.name, "fashion-mnist");
    ASSERT_EQ(d.size, n);
    EXPECT_EQ(d.sample_shape, (Shape{784}));
    EXPECT_EQ(d.dtype, DType::F32);
    EXPECT_EQ(d.num_classes, 10);
    EXPECT_EQ(d.label_elements, 1);
    ASSERT_EQ(d.x_f32.size(), size_t(n * 784));
    ASSERT_EQ(d.labels.size(), size_t(n));
    EXPECT_TRUE(d.x_i32.empty());

    std::map<int32_t, int64_t> histogram;
    for (int32_t l : d.labels) histogram[l]++;
    ASSERT_EQ(histogram.size(), 10u);
    for (auto [label, count] : histogram) {
        EXPECT_GE(label, 0);
        EXPECT_LT(label, 10);
        EXPECT_EQ(count, n / 10) << "label " << label;
    }

    const std::string prefix = dir + "/" + (train ? "train" : "t10k");
    const std::vector<uint8_t> images = gunzip(prefix + "-images-idx3-ubyte.gz");
    const std::vector<uint8_t> labels = gunzip(prefix + "-labels-idx1-ubyte.gz");
    ASSERT_EQ(images.size(), size_t(16 + n * 784));
    ASSERT_EQ(labels.size(), size_t(8 + n));
    for (int64_t s : {int64_t(0), int64_t(1), int64_t(777), n / 2 + 3, n - 1}) {
        EXPECT_EQ(d.labels[s], labels[8 + s]) << "sample " << s;
        for (int64_t i = 0; i < 784; i++)
            ASSERT_NEAR(d.x_f32[s * 784 + i], normalised(images[16 + s * 784 + i]), 1e-6)
                << "sample " << s << " pixel " << i;
    }
    // Every value is one of the 256 normalised pixel levels: the extremes are exact.
    const auto [lo, hi] = std::minmax_element(d.x_f32.begin(), d.x_f32.end());
    EXPECT_NEAR(*lo, -0.2860f / 0.3530f, 1e-6);
    EXPECT_NEAR(*hi, (1.0f - 0.2860f) / 0.3530f, 1e-6);

    // The constants are the training set's statistics, so it comes out standardised.
    double sum = 0, sq = 0;
    for (float v : d.x_f32) sum += v, sq += double(v) * v;
    const double mean = sum / d.x_f32.size();
    const double stdev = std::sqrt(sq / d.x_f32.size() - mean * mean);
    if (train) {
        EXPECT_NEAR(mean, 0.0, 2e-3);
        EXPECT_NEAR(stdev, 1.0, 2e-3);
    } else {
        EXPECT_NEAR(mean, 0.0, 0.02);
        EXPECT_NEAR(stdev, 1.0, 0.02);
    }
}

INSTANTIATE_TEST_SUITE_P(Splits, FashionMnistReal, ::testing::Values(true, false),
                         [](const auto &info) { return info.param ? "Train" : "Test"; });

// ---- Hand-made IDX files --------------------------------------------------------------

void put_be32(std::vector<uint8_t> &b, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

std::vector<uint8_t> idx_images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                                int64_t pixels) {
    std::vector<uint8_t> b;
    put_be32(b, magic);
    put_be32(b, count);
    put_be32(b, rows);
    put_be32(b, cols);
    for (int64_t i = 0; i < pixels; i++) b.push_back(uint8_t((i * 37 + 11) % 256));
    return b;
}

std::vector<uint8_t> idx_labels(uint32_t magic, uint32_t count, std::vector<uint8_t> values) {
    std::vector<uint8_t> b;
    put_be32(b, magic);
    put_be32(b, count);
    b.insert(b.end(), values.begin(), values.end());
    return b;
}

void write_gz(const fs::path &path, const std::vector<uint8_t> &bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
        ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
}

class FashionMnistFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("tessera_data_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        images_ = (dir_ / "train-images-idx3-ubyte.gz").string();
        labels_ = (dir_ / "train-labels-idx1-ubyte.gz").string();
        write_gz(images_, idx_images(2051, 3, 28, 28, 3 * 784));
        write_gz(labels_, idx_labels(2049, 3, {4, 0, 9}));
    }
    void TearDown() override { fs::remove_all(dir_); }
    Dataset load() const { return load_fashion_mnist(dir_.string(), true); }

    fs::path dir_;
    std::string images_, labels_;
};

TEST_F(FashionMnistFiles, SmallValidSetLoads) {
    const Dataset d = load();
    EXPECT_EQ(d.size, 3);
    EXPECT_EQ(d.labels, (std::vector<int32_t>{4, 0, 9}));
    for (int64_t i = 0; i < 3 * 784; i++)
        ASSERT_NEAR(d.x_f32[i], normalised(uint8_t((i * 37 + 11) % 256)), 1e-6) << i;
    // The test split reads the t10k- names, which are not here.
    expect_error([&] { load_fashion_mnist(dir_.string(), false); },
                 {(dir_ / "t10k-images-idx3-ubyte.gz").string(), "not found"});
}

TEST_F(FashionMnistFiles, MissingDirectory) {
    const std::string missing = (dir_ / "nope").string();
    expect_error([&] { load_fashion_mnist(missing, true); },
                 {"directory '" + missing + "' does not exist", "--data-dir", "dataset-fashion-mnist"});
}

TEST_F(FashionMnistFiles, MissingFile) {
    fs::remove(labels_);
    expect_error([&] { load(); },
                 {"'" + labels_ + "' not found", "--data-dir", "dataset-fashion-mnist"});
}

TEST_F(FashionMnistFiles, BadMagic) {
    write_gz(images_, idx_images(2049, 3, 28, 28, 3 * 784));
    expect_error([&] { load(); }, {images_, "magic number 2049", "must have 2051"});
    write_gz(images_, idx_images(2051, 3, 28, 28, 3 * 784));
    write_gz(labels_, idx_labels(2051, 3, {1, 2, 3}));
    expect_error([&] { load(); }, {labels_, "magic number 2051", "must have 2049"});
}

TEST_F(FashionMnistFiles, WrongImageSize) {
    write_gz(images_, idx_images(2051, 3, 28, 27, 3 * 28 * 27));
    expect_error([&] { load(); }, {images_, "images of 28x27 pixels"});
}

TEST_F(FashionMnistFiles, TruncatedPixels) {
    write_gz(images_, idx_images(2051, 3, 28, 28, 3 * 784 - 100));
    expect_error([&] { load(); }, {images_, "truncated", "3 images of 28x28 (2352 bytes)",
                                   "only 2252 bytes follow"});
}

TEST_F(FashionMnistFiles, TruncatedHeader) {
    write_gz(labels_, {0, 0, 8, 1, 0});
    expect_error([&] { load(); }, {labels_, "truncated", "holds 5 bytes", "8-byte IDX header"});
    write_gz(images_, {});
    expect_error([&] { load(); }, {images_, "truncated", "holds 0 bytes"});
}

TEST_F(FashionMnistFiles, TrailingBytes) {
    write_gz(labels_, idx_labels(2049, 3, {1, 2, 3, 4}));
    expect_error([&] { load(); }, {labels_, "1 bytes after the 3 labels"});
}

TEST_F(FashionMnistFiles, LabelCountMismatch) {
    write_gz(labels_, idx_labels(2049, 2, {1, 2}));
    expect_error([&] { load(); }, {labels_, "holds 2 labels", images_, "holds 3 images"});
}

TEST_F(FashionMnistFiles, LabelOutOfRange) {
    write_gz(labels_, idx_labels(2049, 3, {1, 10, 3}));
    expect_error([&] { load(); }, {labels_, "label 10 for sample 1", "[0, 10)"});
}

TEST_F(FashionMnistFiles, CorruptGzipStream) {
    // Cut a valid gzip file in half: the deflate stream ends early.
    write_gz(images_, idx_images(2051, 3, 28, 28, 3 * 784));
    const auto full = fs::file_size(images_);
    fs::resize_file(images_, full / 2);
    expect_error([&] { load(); }, {images_, "corrupt"});
    // Flip bytes inside the deflate data: zlib reports a data or checksum error.
    write_gz(images_, idx_images(2051, 3, 28, 28, 3 * 784));
    {
        std::FILE *f = std::fopen(images_.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        std::fseek(f, 20, SEEK_SET);
        const uint8_t junk[8] = {0xff, 0x00, 0xff, 0x00, 0xff, 0x00, 0xff, 0x00};
        std::fwrite(junk, 1, sizeof junk, f);
        std::fclose(f);
    }
    expect_error([&] { load(); }, {images_, "corrupt"});
}

// ---- Batcher ----------------------------------------------------------------------------

// Sample s has inputs {s, s + 0.5} and label s % 7, so rows can be traced back.
Dataset indexed(int64_t n) {
    Dataset d;
    d.name = "indexed";
    d.sample_shape = {2};
    d.size = n;
    d.num_classes = 7;
    for (int64_t s = 0; s < n; s++) {
        d.x_f32.push_back(float(s));
        d.x_f32.push_back(float(s) + 0.5f);
        d.labels.push_back(int32_t(s % 7));
    }
    return d;
}

bool is_permutation_of_n(std::vector<int64_t> p) {
    std::sort(p.begin(), p.end());
    for (size_t i = 0; i < p.size(); i++)
        if (p[i] != int64_t(i)) return false;
    return true;
}

TEST(Batcher, EpochsArePermutationsThatDependOnSeedAndEpoch) {
    const Dataset d = indexed(1000);
    const Batcher a(d, 32, 42, true), b(d, 32, 42, true), c(d, 32, 43, true);
    std::vector<std::vector<int64_t>> seen;
    for (int64_t e = 0; e < 6; e++) {
        const std::vector<int64_t> p = a.order(e);
        EXPECT_TRUE(is_permutation_of_n(p)) << "epoch " << e;
        EXPECT_EQ(p, b.order(e)) << "same seed, epoch " << e;
        EXPECT_NE(p, c.order(e)) << "other seed, epoch " << e;
        int64_t fixed = 0;
        for (int64_t i = 0; i < 1000; i++) fixed += p[i] == i;
        EXPECT_LT(fixed, 10) << "epoch " << e << " is barely shuffled";
        for (const auto &q : seen) EXPECT_NE(p, q) << "epoch " << e << " repeats an earlier one";
        seen.push_back(p);
    }
    const Batcher plain(d, 32, 42, false);
    std::vector<int64_t> identity(1000);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(plain.order(0), identity);
    EXPECT_EQ(plain.order(5), identity);
}

TEST(Batcher, ShuffleIsUniformOverSmallPermutations) {
    // 4 samples have 24 orders; over 24000 epochs each should appear about 1000 times.
    const Dataset d = indexed(4);
    const Batcher b(d, 1, 7, true);
    std::map<std::vector<int64_t>, int64_t> counts;
    for (int64_t e = 0; e < 24000; e++) counts[b.order(e)]++;
    ASSERT_EQ(counts.size(), 24u);
    for (const auto &[perm, count] : counts) {
        EXPECT_GT(count, 850);
        EXPECT_LT(count, 1150);
    }
}

TEST(Batcher, FillFollowsTheOrderAndResumes) {
    const Dataset d = indexed(103);
    const Batcher b(d, 10, 5, true);
    EXPECT_EQ(b.batches_per_epoch(), 10);  // the last 3 samples are dropped
    std::vector<float> x(20);
    std::vector<int32_t> labels(10);
    std::vector<std::vector<float>> walked;
    for (int64_t e = 0; e < 3; e++) {
        const std::vector<int64_t> order = b.order(e);
        std::vector<int64_t> covered;
        for (int64_t i = 0; i < b.batches_per_epoch(); i++) {
            b.fill(e, i, x.data(), nullptr, labels.data());
            walked.push_back(x);
            for (int64_t r = 0; r < 10; r++) {
                const int64_t s = order[i * 10 + r];
                ASSERT_EQ(x[2 * r], float(s));
                ASSERT_EQ(x[2 * r + 1], float(s) + 0.5f);
                ASSERT_EQ(labels[r], s % 7);
                covered.push_back(s);
            }
        }
        std::sort(covered.begin(), covered.end());
        EXPECT_EQ(std::unique(covered.begin(), covered.end()), covered.end()) << "a sample repeats";
    }
    // A fresh batcher (as after a restart) asked for epoch 2, batch 4 first gives the
    // same rows, and so does going back to an earlier epoch.
    const Batcher resumed(d, 10, 5, true);
    resumed.fill(2, 4, x.data(), nullptr, labels.data());
    EXPECT_EQ(x, walked[2 * 10 + 4]);
    resumed.fill(0, 7, x.data(), nullptr, labels.data());
    EXPECT_EQ(x, walked[7]);
}

TEST(Batcher, EvalWalksInOrderAndPads) {
    const Dataset d = indexed(25);
    const Batcher b(d, 10, 5, true);  // shuffle does not apply to evaluation
    ASSERT_EQ(b.eval_batches(), 3);
    std::vector<float> x(20, -1.0f);
    std::vector<int32_t> labels(10, -1);
    for (int64_t i = 0; i < 3; i++) {
        const int64_t valid = b.fill_eval(i, x.data(), nullptr, labels.data());
        EXPECT_EQ(valid, i < 2 ? 10 : 5);
        for (int64_t r = 0; r < 10; r++) {
            const int64_t s = i * 10 + r;
            if (r < valid) {
                EXPECT_EQ(x[2 * r], float(s));
                EXPECT_EQ(labels[r], s % 7);
            } else {
                EXPECT_EQ(x[2 * r], 0.0f);
                EXPECT_EQ(x[2 * r + 1], 0.0f);
                EXPECT_EQ(labels[r], 0);
            }
        }
    }
    expect_error([&] { b.fill_eval(3, x.data(), nullptr, labels.data()); },
                 {"evaluation batch index 3 is out of range", "3 batches of 10"});
}

TEST(Batcher, TokenData) {
    SyntheticSpec spec;
    spec.sample_shape = {6};
    spec.dtype = DType::I32;
    spec.vocab = 50;
    spec.num_classes = 0;
    spec.label_elements = 6;
    spec.size = 40;
    const Dataset d = make_synthetic(spec);
    const Batcher b(d, 8, 1, true);
    std::vector<int32_t> xi(48), labels(48);
    b.fill(1, 2, nullptr, xi.data(), labels.data());
    const std::vector<int64_t> order = b.order(1);
    for (int64_t r = 0; r < 8; r++)
        for (int64_t t = 0; t < 6; t++) {
            EXPECT_EQ(xi[r * 6 + t], d.x_i32[order[16 + r] * 6 + t]);
            EXPECT_EQ(labels[r * 6 + t], d.labels[order[16 + r] * 6 + t]);
        }
}

TEST(Batcher, Errors) {
    const Dataset d = indexed(5);
    expect_error([&] { Batcher(d, 0, 1, true); }, {"batch size must be positive, got 0"});
    const Batcher big(d, 8, 1, true);
    std::vector<float> x(16);
    std::vector<int32_t> labels(8);
    EXPECT_EQ(big.batches_per_epoch(), 0);
    expect_error([&] { big.fill(0, 0, x.data(), nullptr, labels.data()); },
                 {"indexed has 5 samples, fewer than one batch of 8"});
    const Batcher b(d, 2, 1, true);
    expect_error([&] { b.fill(0, 2, x.data(), nullptr, labels.data()); },
                 {"batch index 2 is out of range", "2 batches of 2"});
    expect_error([&] { b.fill(-1, 0, x.data(), nullptr, labels.data()); },
                 {"epoch must be non-negative, got -1"});
    EXPECT_EQ(big.fill_eval(0, x.data(), nullptr, labels.data()), 5);
}

// ---- Synthetic data ---------------------------------------------------------------------

SyntheticSpec f32_spec() {
    SyntheticSpec s;
    s.sample_shape = {3, 4, 4};
    s.num_classes = 5;
    s.size = 3000;
    s.seed = 11;
    return s;
}

TEST(Synthetic, F32FollowsItsTeacher) {
    const SyntheticSpec spec = f32_spec();
    const Dataset d = make_synthetic(spec);
    EXPECT_EQ(d, make_synthetic(spec)) << "not deterministic";
    SyntheticSpec other = spec;
    other.seed = 12;
    EXPECT_NE(d.x_f32, make_synthetic(other).x_f32);
    EXPECT_NE(synthetic_teacher(spec), synthetic_teacher(other));

    ASSERT_EQ(d.size, 3000);
    EXPECT_EQ(d.sample_shape, spec.sample_shape);
    EXPECT_EQ(d.num_classes, 5);
    ASSERT_EQ(d.x_f32.size(), size_t(3000 * 48));
    ASSERT_EQ(d.labels.size(), 3000u);
    for (float v : d.x_f32) {
        ASSERT_GE(v, -1.0f);
        ASSERT_LT(v, 1.0f);
    }
    const std::vector<float> w = synthetic_teacher(spec);
    ASSERT_EQ(w.size(), size_t(5 * 48));
    std::vector<int64_t> histogram(5);
    for (int64_t s = 0; s < d.size; s++) {
        int64_t best = -1;
        double best_score = -1e300;
        for (int64_t c = 0; c < 5; c++) {
            double score = 0;
            for (int64_t i = 0; i < 48; i++) score += double(w[c * 48 + i]) * d.x_f32[s * 48 + i];
            if (score > best_score) best = c, best_score = score;
        }
        ASSERT_EQ(d.labels[s], best) << "sample " << s;
        histogram[best]++;
    }
    for (int64_t c = 0; c < 5; c++) EXPECT_GT(histogram[c], 3000 / 5 / 4) << "class " << c;

    // The same spec with more samples extends the data: the streams are per element.
    SyntheticSpec more = spec;
    more.size = 3500;
    const Dataset m = make_synthetic(more);
    EXPECT_TRUE(std::equal(d.x_f32.begin(), d.x_f32.end(), m.x_f32.begin()));
}

TEST(Synthetic, F32IsLearnableByALinearModel) {
    // A multiclass perceptron, knowing nothing of the teacher, fits the labels.
    SyntheticSpec spec = f32_spec();
    spec.sample_shape = {16};
    spec.size = 2000;
    const Dataset d = make_synthetic(spec);
    std::vector<double> w(5 * 16, 0.0);
    auto predict = [&](int64_t s) {
        int64_t best = 0;
        double best_score = -1e300;
        for (int64_t c = 0; c < 5; c++) {
            double score = 0;
            for (int64_t i = 0; i < 16; i++) score += w[c * 16 + i] * d.x_f32[s * 16 + i];
            if (score > best_score) best = c, best_score = score;
        }
        return best;
    };
    for (int epoch = 0; epoch < 30; epoch++)
        for (int64_t s = 0; s < d.size; s++) {
            const int64_t p = predict(s), y = d.labels[s];
            if (p == y) continue;
            for (int64_t i = 0; i < 16; i++) {
                w[y * 16 + i] += d.x_f32[s * 16 + i];
                w[p * 16 + i] -= d.x_f32[s * 16 + i];
            }
        }
    int64_t right = 0;
    for (int64_t s = 0; s < d.size; s++) right += predict(s) == d.labels[s];
    EXPECT_GT(right, d.size * 95 / 100);
}

TEST(Synthetic, TokensFollowTheNextTokenRule) {
    SyntheticSpec spec;
    spec.sample_shape = {32};
    spec.dtype = DType::I32;
    spec.vocab = 100;
    spec.num_classes = 0;
    spec.label_elements = 32;
    spec.size = 200;
    spec.seed = 3;
    const Dataset d = make_synthetic(spec);
    EXPECT_EQ(d, make_synthetic(spec));
    EXPECT_EQ(d.num_classes, 100);
    EXPECT_EQ(d.vocab, 100);
    EXPECT_EQ(d.label_elements, 32);
    EXPECT_TRUE(d.x_f32.empty());
    ASSERT_EQ(d.x_i32.size(), size_t(200 * 32));
    ASSERT_EQ(d.labels.size(), size_t(200 * 32));
    const NextTokenRule rule = synthetic_rule(spec);
    EXPECT_EQ(std::gcd(rule.a, int64_t(100)), 1);
    EXPECT_FALSE(rule.a == 1 && rule.b == 0) << "seed 3 happens to give the identity rule";
    int64_t follows = 0;
    std::vector<bool> seen(100);
    for (int64_t s = 0; s < d.size; s++)
        for (int64_t t = 0; t < 32; t++) {
            const int32_t x = d.x_i32[s * 32 + t];
            ASSERT_GE(x, 0);
            ASSERT_LT(x, 100);
            seen[x] = true;
            ASSERT_EQ(d.labels[s * 32 + t], (rule.a * x + rule.b) % 100) << s << ", " << t;
            if (t + 1 < 32) follows += d.x_i32[s * 32 + t + 1] == d.labels[s * 32 + t];
        }
    // Mostly the shifted sequence (7 steps in 8), with restarts in between.
    const double frac = double(follows) / (200 * 31);
    EXPECT_GT(frac, 0.82);
    EXPECT_LT(frac, 0.93);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 100);
}

TEST(Synthetic, TokenSequenceClassification) {
    SyntheticSpec spec;
    spec.sample_shape = {10};
    spec.dtype = DType::I32;
    spec.vocab = 30;
    spec.num_classes = 4;
    spec.label_elements = 1;
    spec.size = 500;
    const Dataset d = make_synthetic(spec);
    const NextTokenRule rule = synthetic_rule(spec);
    std::vector<int64_t> histogram(4);
    for (int64_t s = 0; s < d.size; s++) {
        const int64_t last = d.x_i32[s * 10 + 9];
        ASSERT_EQ(d.labels[s], (rule.a * last + rule.b) % 30 % 4);
        histogram[d.labels[s]]++;
    }
    for (int64_t c = 0; c < 4; c++) EXPECT_GT(histogram[c], 50);
}

TEST(Synthetic, SpecErrors) {
    SyntheticSpec s = f32_spec();
    s.sample_shape = {};
    expect_error([&] { make_synthetic(s); }, {"needs a sample shape"});
    s = f32_spec();
    s.sample_shape = {3, 0};
    expect_error([&] { make_synthetic(s); }, {"sample shape [3, 0] has a non-positive dimension"});
    s = f32_spec();
    s.size = 0;
    expect_error([&] { make_synthetic(s); }, {"size must be positive, got 0"});
    s = f32_spec();
    s.num_classes = 1;
    expect_error([&] { make_synthetic(s); }, {"at least 2 classes, got 1"});
    s = f32_spec();
    s.label_elements = 4;
    expect_error([&] { make_synthetic(s); }, {"one label per sample", "4 labels per sample"});
    s.dtype = DType::I32;
    s.sample_shape = {8};
    s.vocab = 1;
    s.label_elements = 8;
    expect_error([&] { make_synthetic(s); }, {"vocabulary of 2 to 2^31-1 ids, got 1"});
    s.vocab = 20;
    s.label_elements = 3;
    expect_error([&] { make_synthetic(s); }, {"one per token (8 for sample shape [8]), not 3"});
    s.label_elements = 8;
    s.num_classes = 10;
    expect_error([&] { make_synthetic(s); }, {"num_classes must be the vocabulary 20, not 10"});
    s.num_classes = 0;
    EXPECT_NO_THROW(make_synthetic(s));
    expect_error([&] { synthetic_teacher(s); }, {"only f32 synthetic data has a linear teacher"});
    expect_error([&] { synthetic_rule(f32_spec()); }, {"only token synthetic data"});
}

// ---- check_fits -------------------------------------------------------------------------

TEST(CheckFits, AcceptsMatchingElementCounts) {
    Dataset d;
    d.name = "fashion-mnist";
    d.sample_shape = {784};
    d.num_classes = 10;
    EXPECT_NO_THROW(check_fits(d, {DType::F32, {64, 1, 28, 28}}, {DType::I32, {64}}, "cnn", 10));
    EXPECT_NO_THROW(check_fits(d, {DType::F32, {64, 784}}, {DType::I32, {64}}, "mlp", 12));
}

TEST(CheckFits, Errors) {
    Dataset d;
    d.name = "fashion-mnist";
    d.sample_shape = {784};
    d.num_classes = 10;
    expect_error([&] { check_fits(d, {DType::F32, {32, 3072}}, {DType::I32, {32}}, "mlp"); },
                 {"model 'mlp' takes inputs of 3072 values per sample but fashion-mnist gives 784 "
                  "(sample shape [784])"});
    expect_error([&] { check_fits(d, {DType::I32, {32, 784}}, {DType::I32, {32}}, "lstm"); },
                 {"model 'lstm' takes i32 token ids as input but fashion-mnist gives f32 values"});
    expect_error([&] { check_fits(d, {DType::F32, {32, 784}}, {DType::I32, {32, 16}}, "tf"); },
                 {"model 'tf' takes 16 labels per sample but fashion-mnist gives 1"});
    expect_error([&] { check_fits(d, {DType::F32, {32, 784}}, {DType::F32, {32}}, "mlp"); },
                 {"model 'mlp' has labels f32[32]; class labels must be i32"});
    expect_error([&] { check_fits(d, {DType::F32, {32, 784}}, {DType::I32, {32}}, "mlp", 5); },
                 {"model 'mlp' predicts 5 classes but fashion-mnist has labels in [0, 10)"});
    expect_error([&] { check_fits(d, {DType::F32, {}}, {DType::I32, {32}}, "mlp"); },
                 {"model 'mlp' has input f32[] with no batch dimension"});
    Dataset t;
    t.name = "synthetic";
    t.sample_shape = {16};
    t.dtype = DType::I32;
    t.vocab = 500;
    t.num_classes = 500;
    t.label_elements = 16;
    EXPECT_NO_THROW(check_fits(t, {DType::I32, {4, 16}}, {DType::I32, {4, 16}}, "tf", 500, 500));
    EXPECT_NO_THROW(check_fits(t, {DType::I32, {4, 16}}, {DType::I32, {64}}, "tf", 500, 500));
    expect_error([&] { check_fits(t, {DType::I32, {4, 16}}, {DType::I32, {63}}, "tf", 500, 500); },
                 {"model 'tf' has input batch 4 but 63 labels, not a multiple of the batch"});
    expect_error([&] { check_fits(t, {DType::I32, {4, 16}}, {DType::I32, {4, 16}}, "tf", 0, 100); },
                 {"model 'tf' embeds 100 token ids but synthetic has token ids in [0, 500)"});
}

}  // namespace
}  // namespace tessera
