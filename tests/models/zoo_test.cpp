// The model zoo: spec parsing, every error message, the shapes and parameter
// counts of every model against formulas written here (and torchvision's published
// ResNet counts), forward values of mlp, lstm and transformer against plain loops,
// causality of the language models, and 10-billion-parameter graphs that build
// (training graph included) in well under a second.
#include <chrono>
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "tessera/error.h"
#include "tessera/exec/reference.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"

namespace tessera {
namespace {

// ---- helpers ---------------------------------------------------------------------

std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const Error &e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a tessera::Error";
    return "";
}

void expect_error(const std::function<void()> &f, const std::vector<std::string> &parts) {
    std::string msg = error_of(f);
    for (const std::string &p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

void expect_build_error(const std::string &spec, const std::vector<std::string> &parts, int64_t batch = 4) {
    SCOPED_TRACE(spec);
    expect_error([&] { build_model(spec, batch); }, parts);
}

const TensorType &type_of(const Model &m, TensorId t) { return m.graph.tensor(t).type; }
const TensorInfo &info(const Model &m, const std::string &name) { return m.graph.tensor(m.graph.tensor_named(name)); }

// Every graph input gets a value: seeded normal f32 data and parameters (times
// `scale`), token ids and labels in range, constants from their initialiser.
std::map<TensorId, HostBuffer> random_inputs(const Model &m, uint32_t seed, float scale = 0.5f) {
    const Graph &g = m.graph;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::map<TensorId, HostBuffer> values;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.producer != kNoNode) continue;
        const int64_t n = info.type.elements();
        if (info.type.dtype == DType::I32) {
            std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(m.num_classes - 1));
            std::vector<int32_t> v(n);
            for (int32_t &x : v) x = pick(rng);
            values[t] = to_buffer(v);
            continue;
        }
        std::vector<float> v(n, 0.0f);
        if (info.role == TensorRole::Constant) {
            if (info.init.kind == Init::Kind::Constant) std::fill(v.begin(), v.end(), float(info.init.value));
            if (info.init.kind == Init::Kind::CausalMask) {
                const int64_t T = info.type.shape.back();
                for (int64_t k = 0; k < n; k++)
                    if (k % T > (k / T) % T) v[k] = float(info.init.value);
            }
        } else {
            for (float &x : v) x = (info.role == TensorRole::Param ? scale : 1.0f) * normal(rng);
        }
        values[t] = to_buffer(v);
    }
    return values;
}

std::vector<float> value_of(const Model &m, const std::map<TensorId, HostBuffer> &v, const std::string &name) {
    return from_buffer<float>(v.at(m.graph.tensor_named(name)));
}

void expect_close(const std::vector<float> &got, const std::vector<double> &want, double tol) {
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (std::abs(got[i] - want[i]) > tol * (1 + std::abs(want[i])) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    EXPECT_EQ(bad, 0);
}

// y = x W + b for row-major x [rows, in], W [in, out].
std::vector<double> affine(const std::vector<double> &x, int64_t in, const std::vector<float> &w,
                           const std::vector<float> &b, int64_t out) {
    int64_t rows = static_cast<int64_t>(x.size()) / in;
    std::vector<double> y(rows * out);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < out; j++) {
            double s = b[j];
            for (int64_t k = 0; k < in; k++) s += x[r * in + k] * w[k * out + j];
            y[r * out + j] = s;
        }
    return y;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// ---- spec parsing ------------------------------------------------------------------

TEST(ModelSpec, ParsesNameAndParameters) {
    ModelSpec s = parse_model_spec("mlp:layers=3,hidden=1024");
    EXPECT_EQ(s.name, "mlp");
    EXPECT_EQ(s.params, (std::map<std::string, std::string>{{"layers", "3"}, {"hidden", "1024"}}));
    EXPECT_EQ(parse_model_spec("cnn"), (ModelSpec{"cnn", {}}));
    EXPECT_EQ(parse_model_spec("  wresnet : depth = 152 , width=10 "),
              (ModelSpec{"wresnet", {{"depth", "152"}, {"width", "10"}}}));
    EXPECT_EQ(model_spec_str(s), "mlp:hidden=1024,layers=3");
    EXPECT_EQ(parse_model_spec(model_spec_str(s)), s);
    EXPECT_EQ(model_spec_str(ModelSpec{"cnn", {}}), "cnn");
}

TEST(ModelSpec, SyntaxErrorsQuoteTheText) {
    expect_error([] { parse_model_spec(""); }, {"model spec ''", "no model name", "mlp, cnn, wresnet, lstm"});
    expect_error([] { parse_model_spec(":layers=3"); }, {"model spec ':layers=3'", "no model name"});
    expect_error([] { parse_model_spec("mlp:"); }, {"model spec 'mlp:'", "nothing after ':'"});
    expect_error([] { parse_model_spec("mlp:layers"); }, {"'mlp:layers'", "'layers' is not key=value"});
    expect_error([] { parse_model_spec("mlp:=3"); }, {"'mlp:=3'", "no key before '='"});
    expect_error([] { parse_model_spec("mlp:layers="); }, {"'mlp:layers='", "parameter 'layers' has no value"});
    expect_error([] { parse_model_spec("mlp:layers=3,layers=4"); }, {"sets parameter 'layers' twice"});
    expect_error([] { parse_model_spec("mlp:layers=3,"); }, {"'mlp:layers=3,'", "ends with ','"});
    expect_error([] { parse_model_spec("mlp:layers=3,,hidden=4"); }, {"'' is not key=value"});
}

// ---- errors from build_model ------------------------------------------------------------

TEST(ModelZoo, UnknownModelListsTheModels) {
    expect_build_error("resnet:depth=50", {"unknown model 'resnet'", "spec 'resnet:depth=50'",
                                           "valid models: mlp, cnn, wresnet, lstm, transformer"});
    EXPECT_EQ(model_names(), (std::vector<std::string>{"mlp", "cnn", "wresnet", "lstm", "transformer"}));
}

TEST(ModelZoo, UnknownParameterListsTheModelsParameters) {
    expect_build_error("mlp:hiden=3", {"model 'mlp' has no parameter 'hiden'",
                                       "valid parameters: layers, hidden, input, classes"});
    expect_build_error("cnn:layers=3", {"'cnn' has no parameter 'layers'",
                                        "valid parameters: convs, channels, depth, kernel, hidden, classes"});
    expect_build_error("wresnet:layers=3", {"valid parameters: depth, width, image, channels, classes, base"});
    expect_build_error("lstm:heads=3", {"valid parameters: layers, hidden, seq, vocab, embed"});
    expect_build_error("transformer:hidden=3", {"valid parameters: layers, d_model, heads, seq, vocab, ffn"});
}

TEST(ModelZoo, BadValuesSayWhatIsValid) {
    expect_build_error("mlp:hidden=abc", {"model 'mlp'", "hidden = 'abc' is not an integer",
                                          "between 1 and 2147483647", "default 1024"});
    expect_build_error("mlp:hidden=12x", {"hidden = '12x' is not an integer"});
    expect_build_error("mlp:hidden=1.5", {"hidden = '1.5' is not an integer"});
    expect_build_error("mlp:hidden=0", {"model 'mlp'", "hidden = 0 is out of range", "between 1 and"});
    expect_build_error("mlp:layers=-2", {"layers = -2 is out of range", "between 1 and", "default 3"});
    expect_build_error("mlp:hidden=99999999999999999999", {"hidden = 99999999999999999999 is out of range"});
    expect_build_error("mlp:classes=1", {"classes = 1 is out of range", "between 2 and"});
    expect_build_error("cnn:convs=5", {"model 'cnn'", "convs = 5 is out of range", "between 1 and 4"});
    expect_build_error("cnn:kernel=4", {"model 'cnn'", "kernel = 4 must be odd", "try 3 or 5"});
    expect_build_error("cnn:hidden=-1", {"hidden = -1 is out of range", "between 0 and"});
    expect_build_error("wresnet:depth=20", {"model 'wresnet'", "depth = 20 is not supported",
                                            "valid depths: 18, 34, 50, 101, 152"});
    expect_build_error("transformer:heads=3", {"model 'transformer'", "heads = 3 does not divide d_model = 128",
                                               "divisors of 128 (1, 2, 4, 8, 16, 32, 64, 128)"});
    expect_build_error("transformer:d_model=12,heads=5", {"heads = 5 does not divide d_model = 12", "(1, 2, 3, 4, 6, 12)"});
    expect_build_error("lstm:seq=0", {"model 'lstm'", "seq = 0 is out of range"});
    expect_build_error("lstm:layers=100,seq=2000", {"model 'lstm'", "layers x seq = 100 x 2000 = 200000",
                                                    "at most 2380"});
    // Graphs of millions of operators (LargestModelsStayWithinTheOperatorBound).
    expect_build_error("mlp:layers=2000000000", {"model 'mlp'", "layers = 2000000000 is out of range",
                                                 "between 1 and 16666"});
    expect_build_error("transformer:layers=4096", {"model 'transformer'", "layers = 4096 is out of range",
                                                   "between 1 and 1470"});
    expect_build_error("mlp", {"model 'mlp'", "batch size must be at least 1, got 0"}, 0);
}

TEST(ModelZoo, HelpListsEveryModelAndParameter) {
    std::string help = models_help();
    for (const char *s : {"mlp", "layers=3", "hidden=1024", "input=784", "classes=10", "cnn", "convs=2",
                          "channels=32", "kernel=3", "hidden=256", "0 = none", "wresnet", "depth=50", "width=1",
                          "image=32", "base=64", "18 or 34", "lstm", "seq=16", "vocab=1000", "embed=hidden",
                          "transformer", "d_model=128", "heads=4", "seq=32", "ffn=4*d_model", "FILE.onnx", "output=NAME"})
        EXPECT_NE(help.find(s), std::string::npos) << s << " not in:\n" << help;
}

TEST(ModelZoo, FormatCount) {
    EXPECT_EQ(format_count(950), "950");
    EXPECT_EQ(format_count(12345), "12.3K");
    EXPECT_EQ(format_count(1863690), "1.86M");
    EXPECT_EQ(format_count(138000000), "138M");
    EXPECT_EQ(format_count(6040000000), "6.04B");
}

// ---- parameter-count formulas --------------------------------------------------------

int64_t mlp_params(int64_t layers, int64_t hidden, int64_t input, int64_t classes) {
    std::vector<int64_t> w = {input};
    for (int64_t i = 1; i < layers; i++) w.push_back(hidden);
    w.push_back(classes);
    int64_t n = 0;
    for (size_t i = 0; i + 1 < w.size(); i++) n += w[i] * w[i + 1] + w[i + 1];
    return n;
}

int64_t cnn_params(int64_t convs, int64_t channels, int64_t k, int64_t hidden, int64_t classes) {
    int64_t n = 0, cin = 1, side = 28, c = channels;
    for (int64_t i = 0; i < convs; i++, c *= 2) {
        n += c * cin * k * k + 2 * c;  // conv weight, batch-norm gamma and beta
        cin = c;
        side /= 2;
    }
    int64_t flat = cin * side * side;
    if (hidden > 0) {
        n += flat * hidden + hidden;
        flat = hidden;
    }
    return n + flat * classes + classes;
}

int64_t wresnet_params(int depth, int64_t width, int64_t image, int64_t channels, int64_t classes, int64_t base) {
    std::map<int, std::vector<int>> blocks = {
        {18, {2, 2, 2, 2}}, {34, {3, 4, 6, 3}}, {50, {3, 4, 6, 3}}, {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}};
    const bool bottleneck = depth >= 50;
    auto conv_bn = [](int64_t ci, int64_t co, int64_t k) { return co * ci * k * k + 2 * co; };
    int64_t n = conv_bn(channels, base, image >= 64 ? 7 : 3), in = base;
    for (int s = 0; s < 4; s++) {
        int64_t inner = base * width * (int64_t{1} << s), out = bottleneck ? 4 * inner : inner;
        for (int i = 0; i < blocks[depth][s]; i++) {
            bool stride2 = s > 0 && i == 0;
            n += bottleneck ? conv_bn(in, inner, 1) + conv_bn(inner, inner, 3) + conv_bn(inner, out, 1)
                            : conv_bn(in, inner, 3) + conv_bn(inner, inner, 3);
            if (stride2 || in != out) n += conv_bn(in, out, 1);
            in = out;
        }
    }
    return n + in * classes + classes;
}

// With seq=1 there is no recurrence, so no recurrent weight wh (hidden x 4 hidden).
int64_t lstm_params(int64_t layers, int64_t hidden, int64_t vocab, int64_t embed, int64_t seq = 2) {
    int64_t n = vocab * embed, in = embed;
    const int64_t recurrent = seq > 1 ? hidden : 0;
    for (int64_t l = 0; l < layers; l++, in = hidden) n += (in + recurrent) * 4 * hidden + 4 * hidden;
    return n + hidden * vocab + vocab;
}

int64_t transformer_params(int64_t layers, int64_t d, int64_t seq, int64_t vocab, int64_t ffn) {
    int64_t block = 4 * (d * d + d)       // q, k, v, proj
                    + 4 * d               // two layer norms
                    + (d * ffn + ffn) + (ffn * d + d);
    return vocab * d + seq * d + layers * block + 2 * d + d * vocab + vocab;
}

// ---- every model: defaults and small sizes -------------------------------------------

void expect_contract(const Model &m, int64_t batch, DType input_dtype, const Shape &input_shape, int64_t rows,
                     int64_t classes, int64_t label_elements) {
    EXPECT_EQ(type_of(m, m.input), (TensorType{input_dtype, input_shape}));
    EXPECT_EQ(m.graph.tensor(m.input).name, "input");
    EXPECT_EQ(m.graph.tensor(m.input).role, TensorRole::Data);
    EXPECT_EQ(type_of(m, m.labels), (TensorType{DType::I32, {rows}}));
    EXPECT_EQ(m.graph.tensor(m.labels).name, "labels");
    EXPECT_EQ(type_of(m, m.logits), (TensorType{DType::F32, {rows, classes}}));
    EXPECT_EQ(type_of(m, m.loss), (TensorType{DType::F32, {}}));
    EXPECT_EQ(m.graph.output("loss"), m.loss);
    EXPECT_EQ(m.graph.output("logits"), m.logits);
    EXPECT_EQ(m.num_classes, classes);
    EXPECT_EQ(m.label_elements, label_elements);
    EXPECT_EQ(rows, batch * label_elements);
    EXPECT_EQ(m.graph.with_role(TensorRole::Data).size(), 2u);
}

TEST(ModelZoo, MlpDefaultAndSmall) {
    Model m = build_model("mlp", 128);
    expect_contract(m, 128, DType::F32, {128, 784}, 128, 10, 1);
    EXPECT_EQ(m.graph.param_count(), mlp_params(3, 1024, 784, 10));
    EXPECT_EQ(m.graph.param_count(), 1863690);
    EXPECT_EQ(m.description, "mlp 784-1024-1024-10 (1.86M parameters)");
    EXPECT_TRUE(m.graph.find_tensor("fc2.w").has_value());
    EXPECT_TRUE(m.graph.find_tensor("fc3.b").has_value());

    Model one = build_model("mlp:layers=1,input=5,classes=3", 2);
    expect_contract(one, 2, DType::F32, {2, 5}, 2, 3, 1);
    EXPECT_EQ(one.graph.param_count(), 18);
    Model s = build_model("mlp:layers=4,hidden=7,input=6,classes=5", 3);
    EXPECT_EQ(s.graph.param_count(), mlp_params(4, 7, 6, 5));
    EXPECT_EQ(s.description, "mlp 6-7-7-7-5 (201 parameters)");
}

TEST(ModelZoo, CnnDefaultAndSmall) {
    Model m = build_model("cnn", 64);
    expect_contract(m, 64, DType::F32, {64, 784}, 64, 10, 1);
    EXPECT_EQ(m.graph.param_count(), cnn_params(2, 32, 3, 256, 10));
    EXPECT_EQ(m.description, "cnn 2 convs 32-64 k3, fc 256, 10 classes (825K parameters)");
    EXPECT_EQ(info(m, "conv2.w").type.shape, (Shape{64, 32, 3, 3}));
    EXPECT_EQ(info(m, "fc.w").type.shape, (Shape{64 * 7 * 7, 256}));
    for (auto [convs, ch, k, hidden] : std::vector<std::array<int64_t, 4>>{
             {1, 3, 3, 0}, {3, 4, 5, 8}, {4, 2, 1, 0}, {4, 8, 7, 16}}) {
        std::string spec = "cnn:convs=" + std::to_string(convs) + ",channels=" + std::to_string(ch) +
                           ",kernel=" + std::to_string(k) + ",hidden=" + std::to_string(hidden) + ",classes=4";
        SCOPED_TRACE(spec);
        Model s = build_model(spec, 2);
        expect_contract(s, 2, DType::F32, {2, 784}, 2, 4, 1);
        EXPECT_EQ(s.graph.param_count(), cnn_params(convs, ch, k, hidden, 4));
    }
}

// depth repeats conv-BN-ReLU within a stage: the first conv of a stage maps
// the stage's input channels to its own, the others keep them.
TEST(ModelZoo, CnnDepthRepeatsConvsWithinAStage) {
    Model s = build_model("cnn:convs=2,depth=3,channels=4,kernel=3,hidden=0,classes=4", 2);
    expect_contract(s, 2, DType::F32, {2, 784}, 2, 4, 1);
    int convs = 0;
    for (NodeId n = 0; n < s.graph.num_nodes(); n++) convs += s.graph.node(n).call.kind == OpKind::Conv2d;
    EXPECT_EQ(convs, 6);
    EXPECT_EQ(info(s, "conv1.1.w").type.shape, (Shape{4, 1, 3, 3}));
    EXPECT_EQ(info(s, "conv1.3.w").type.shape, (Shape{4, 4, 3, 3}));
    EXPECT_EQ(info(s, "conv2.1.w").type.shape, (Shape{8, 4, 3, 3}));
    EXPECT_EQ(info(s, "conv2.2.w").type.shape, (Shape{8, 8, 3, 3}));
    // conv weights + BN gamma/beta per conv, then the 8x7x7 -> 4 output layer.
    int64_t params = 4 * 9 + 2 * (4 * 4 * 9) + 3 * 2 * 4 + (8 * 4 * 9) + 2 * (8 * 8 * 9) + 3 * 2 * 8 + 8 * 7 * 7 * 4 + 4;
    EXPECT_EQ(s.graph.param_count(), params);
}

TEST(ModelZoo, WresnetMatchesTorchvisionCounts) {
    // torchvision.models.resnet{18,34,50,101,152}(): ImageNet stem, 1000 classes.
    const std::map<int, int64_t> torchvision = {
        {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
    for (auto [depth, count] : torchvision) {
        Model m = build_model("wresnet:image=224,classes=1000,depth=" + std::to_string(depth), 2);
        EXPECT_EQ(m.graph.param_count(), count) << depth;
        expect_contract(m, 2, DType::F32, {2, 3 * 224 * 224}, 2, 1000, 1);
    }
}

TEST(ModelZoo, WresnetDefaultAndSmall) {
    Model m = build_model("wresnet", 8);
    expect_contract(m, 8, DType::F32, {8, 3 * 32 * 32}, 8, 10, 1);
    EXPECT_EQ(m.graph.param_count(), wresnet_params(50, 1, 32, 3, 10, 64));
    EXPECT_EQ(m.description, "wresnet-50 width 1 base 64, 32x32x3, 10 classes (23.5M parameters)");
    EXPECT_TRUE(m.graph.find_tensor("stage2.block1.shortcut.w").has_value());
    EXPECT_FALSE(m.graph.find_tensor("stage2.block2.shortcut.w").has_value());
    EXPECT_EQ(info(m, "stage4.block3.conv3.w").type.shape, (Shape{2048, 512, 1, 1}));

    for (int depth : {18, 34, 50, 101, 152}) {
        for (auto [width, image, base] : std::vector<std::array<int64_t, 3>>{{1, 8, 4}, {3, 9, 2}, {2, 64, 3}}) {
            std::string spec = "wresnet:depth=" + std::to_string(depth) + ",width=" + std::to_string(width) +
                               ",image=" + std::to_string(image) + ",base=" + std::to_string(base) +
                               ",channels=2,classes=5";
            SCOPED_TRACE(spec);
            Model s = build_model(spec, 2);
            expect_contract(s, 2, DType::F32, {2, 2 * image * image}, 2, 5, 1);
            EXPECT_EQ(s.graph.param_count(), wresnet_params(depth, width, image, 2, 5, base));
        }
    }
}

TEST(ModelZoo, Wresnet152Width10BuildsQuickly) {
    auto start = std::chrono::steady_clock::now();
    Model m = build_model("wresnet:depth=152,width=10", 32);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.5);
    EXPECT_EQ(m.graph.param_count(), wresnet_params(152, 10, 32, 3, 10, 64));
    // Convolution weights grow with the square of the width: about 100x ResNet-152.
    EXPECT_GT(m.graph.param_count(), 5'000'000'000);
    EXPECT_LT(m.graph.param_count(), 6'500'000'000);
    EXPECT_NE(m.description.find("wresnet-152 width 10"), std::string::npos) << m.description;
}

// The largest graphs the zoo accepts stay within its bound of 50,000 forward
// operators (zoo_internal.h), which builds in about a second; one step more is
// refused (BadValuesSayWhatIsValid).
TEST(ModelZoo, LargestModelsStayWithinTheOperatorBound) {
    for (const char *spec : {"mlp:layers=16666,hidden=2,input=2", "lstm:layers=1,seq=2380,hidden=2,vocab=2",
                             "lstm:layers=1024,seq=2,hidden=2,vocab=2", "lstm:layers=17,seq=140,hidden=2,vocab=2",
                             "transformer:layers=1470,d_model=2,heads=1,seq=2,vocab=2"}) {
        SCOPED_TRACE(spec);
        EXPECT_LE(build_model(spec, 1).graph.num_nodes(), 50000);
    }
    expect_build_error("lstm:layers=1,seq=2381", {"layers x seq = 1 x 2381 = 2381", "at most 2380"});
    expect_build_error("transformer:layers=1471", {"layers = 1471 is out of range", "between 1 and 1470"});
}

TEST(ModelZoo, LstmDefaultAndSmall) {
    Model m = build_model("lstm", 32);
    expect_contract(m, 32, DType::I32, {32, 16}, 32 * 16, 1000, 16);
    EXPECT_EQ(m.graph.param_count(), lstm_params(2, 256, 1000, 256));
    EXPECT_EQ(m.description, "lstm 2x256, seq 16, vocab 1000, embed 256 (1.56M parameters)");
    for (auto [layers, hidden, seq, vocab, embed] : std::vector<std::array<int64_t, 5>>{
             {1, 4, 1, 7, 3}, {2, 5, 3, 7, 5}, {3, 2, 9, 11, 6}, {1, 3, 17, 5, 3}}) {
        std::string spec = "lstm:layers=" + std::to_string(layers) + ",hidden=" + std::to_string(hidden) +
                           ",seq=" + std::to_string(seq) + ",vocab=" + std::to_string(vocab) +
                           ",embed=" + std::to_string(embed);
        SCOPED_TRACE(spec);
        Model s = build_model(spec, 2);
        expect_contract(s, 2, DType::I32, {2, seq}, 2 * seq, vocab, seq);
        EXPECT_EQ(s.graph.param_count(), lstm_params(layers, hidden, vocab, embed, seq));
        EXPECT_EQ(s.graph.find_tensor("lstm1.wh").has_value(), seq > 1);
    }
}

TEST(ModelZoo, TransformerDefaultAndSmall) {
    Model m = build_model("transformer", 16);
    expect_contract(m, 16, DType::I32, {16, 32}, 16 * 32, 1000, 32);
    EXPECT_EQ(m.graph.param_count(), transformer_params(2, 128, 32, 1000, 512));
    EXPECT_EQ(m.description,
              "transformer 2 layers, d_model 128, heads 4, ffn 512, seq 32, vocab 1000 (658K parameters)");
    EXPECT_EQ(info(m, "causal_mask").role, TensorRole::Constant);
    EXPECT_EQ(info(m, "causal_mask").init, Init::causal_mask());
    for (auto [layers, d, heads, seq, vocab, ffn] : std::vector<std::array<int64_t, 6>>{
             {1, 4, 1, 1, 5, 3}, {2, 6, 3, 5, 7, 10}, {3, 8, 8, 4, 3, 8}}) {
        std::string spec = "transformer:layers=" + std::to_string(layers) + ",d_model=" + std::to_string(d) +
                           ",heads=" + std::to_string(heads) + ",seq=" + std::to_string(seq) +
                           ",vocab=" + std::to_string(vocab) + ",ffn=" + std::to_string(ffn);
        SCOPED_TRACE(spec);
        Model s = build_model(spec, 3);
        expect_contract(s, 3, DType::I32, {3, seq}, 3 * seq, vocab, seq);
        EXPECT_EQ(s.graph.param_count(), transformer_params(layers, d, seq, vocab, ffn));
    }
}

// Two spellings of one model have one canonical spec: defaults and rules filled in.
TEST(ModelZoo, CanonicalSpecFillsInDefaults) {
    EXPECT_EQ(canonical_model_spec("mlp:hidden=16"), "mlp:classes=10,hidden=16,input=784,layers=3");
    EXPECT_EQ(canonical_model_spec("mlp: layers=3 , hidden=16"), canonical_model_spec("mlp:hidden=16"));
    EXPECT_NE(canonical_model_spec("mlp:hidden=32"), canonical_model_spec("mlp:hidden=16"));
    EXPECT_EQ(canonical_model_spec("transformer:d_model=64"), canonical_model_spec("transformer:d_model=64,ffn=256"));
    expect_error([] { canonical_model_spec("mlp:depth=3"); }, {"model 'mlp' has no parameter 'depth'"});
}

TEST(ModelZoo, SpecOverloadMatchesString) {
    Model a = build_model("transformer:layers=1,d_model=8,heads=2,seq=4,vocab=9", 2);
    Model b = build_model(ModelSpec{"transformer", {{"layers", "1"}, {"d_model", "8"}, {"heads", "2"},
                                                    {"seq", "4"}, {"vocab", "9"}}},
                          2);
    EXPECT_EQ(a.graph, b.graph);
    EXPECT_EQ(a.description, b.description);
}

// ---- forward values against plain loops ------------------------------------------------

TEST(ModelZooForward, MlpMatchesLoops) {
    Model m = build_model("mlp:layers=3,hidden=5,input=4,classes=3", 3);
    auto in = random_inputs(m, 11);
    auto out = evaluate_reference(m.graph, in);
    std::vector<float> xf = from_buffer<float>(in.at(m.input));
    std::vector<double> h(xf.begin(), xf.end());
    int64_t width = 4;
    for (int l = 1; l <= 3; l++) {
        std::vector<float> w = value_of(m, in, "fc" + std::to_string(l) + ".w");
        int64_t next = l == 3 ? 3 : 5;
        h = affine(h, width, w, value_of(m, in, "fc" + std::to_string(l) + ".b"), next);
        if (l < 3)
            for (double &v : h) v = std::max(v, 0.0);
        width = next;
    }
    expect_close(from_buffer<float>(out[m.logits]), h, 1e-5);
}

TEST(ModelZooForward, LstmMatchesLoops) {
    const int64_t B = 2, T = 3, V = 7, H = 4, E = 5, L = 2;
    Model m = build_model("lstm:layers=2,hidden=4,seq=3,vocab=7,embed=5", B);
    auto in = random_inputs(m, 12);
    auto out = evaluate_reference(m.graph, in);
    std::vector<int32_t> ids = from_buffer<int32_t>(in.at(m.input));
    std::vector<float> table = value_of(m, in, "embed");
    std::vector<double> want;  // rows b * T + t
    for (int64_t b = 0; b < B; b++) {
        std::vector<std::vector<double>> h(L, std::vector<double>(H, 0)), c = h;
        for (int64_t t = 0; t < T; t++) {
            int32_t id = ids[b * T + t];
            std::vector<double> x(table.begin() + id * E, table.begin() + (id + 1) * E);
            for (int64_t l = 0; l < L; l++) {
                std::string p = "lstm" + std::to_string(l + 1);
                std::vector<double> gates = affine(x, x.size(), value_of(m, in, p + ".wx"), value_of(m, in, p + ".b"),
                                                   4 * H);
                std::vector<double> hg = affine(h[l], H, value_of(m, in, p + ".wh"), std::vector<float>(4 * H, 0),
                                                4 * H);
                for (int64_t j = 0; j < 4 * H; j++) gates[j] += hg[j];
                for (int64_t j = 0; j < H; j++) {
                    double i = sigmoid(gates[j]), f = sigmoid(gates[H + j]), g = std::tanh(gates[2 * H + j]),
                           o = sigmoid(gates[3 * H + j]);
                    c[l][j] = f * c[l][j] + i * g;
                    h[l][j] = o * std::tanh(c[l][j]);
                }
                x = h[l];
            }
            std::vector<double> logits = affine(x, H, value_of(m, in, "out.w"), value_of(m, in, "out.b"), V);
            want.insert(want.end(), logits.begin(), logits.end());
        }
    }
    expect_close(from_buffer<float>(out[m.logits]), want, 1e-5);
}

std::vector<double> layer_norm_rows(const std::vector<double> &x, int64_t d, const std::vector<float> &gamma,
                                    const std::vector<float> &beta) {
    std::vector<double> y(x.size());
    for (size_t r = 0; r < x.size() / d; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += x[r * d + j] / d;
        for (int64_t j = 0; j < d; j++) var += (x[r * d + j] - mean) * (x[r * d + j] - mean) / d;
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + 1e-5) * gamma[j] + beta[j];
    }
    return y;
}

TEST(ModelZooForward, TransformerMatchesLoops) {
    const int64_t B = 2, T = 4, D = 8, NH = 2, DH = 4, V = 7, F = 12, L = 2;
    Model m = build_model("transformer:layers=2,d_model=8,heads=2,seq=4,vocab=7,ffn=12", B);
    auto in = random_inputs(m, 13);
    auto out = evaluate_reference(m.graph, in);
    std::vector<int32_t> ids = from_buffer<int32_t>(in.at(m.input));
    std::vector<float> tok = value_of(m, in, "tok_embed"), pos = value_of(m, in, "pos_embed");
    auto v = [&](const std::string &name) { return value_of(m, in, name); };
    std::vector<double> x(B * T * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < D; j++) x[(b * T + t) * D + j] = tok[ids[b * T + t] * D + j] + pos[t * D + j];
    for (int64_t l = 1; l <= L; l++) {
        std::string p = "block" + std::to_string(l) + ".";
        std::vector<double> y = layer_norm_rows(x, D, v(p + "ln1.gamma"), v(p + "ln1.beta"));
        std::vector<double> q = affine(y, D, v(p + "attn.q.w"), v(p + "attn.q.b"), D);
        std::vector<double> k = affine(y, D, v(p + "attn.k.w"), v(p + "attn.k.b"), D);
        std::vector<double> val = affine(y, D, v(p + "attn.v.w"), v(p + "attn.v.b"), D);
        std::vector<double> ctx(B * T * D, 0);
        for (int64_t b = 0; b < B; b++)
            for (int64_t hd = 0; hd < NH; hd++)
                for (int64_t t = 0; t < T; t++) {
                    std::vector<double> s(t + 1);
                    double mx = -1e300, sum = 0;
                    for (int64_t u = 0; u <= t; u++) {
                        s[u] = 0;
                        for (int64_t j = 0; j < DH; j++)
                            s[u] += q[(b * T + t) * D + hd * DH + j] * k[(b * T + u) * D + hd * DH + j];
                        s[u] /= std::sqrt(double(DH));
                        mx = std::max(mx, s[u]);
                    }
                    for (double &e : s) sum += (e = std::exp(e - mx));
                    for (int64_t u = 0; u <= t; u++)
                        for (int64_t j = 0; j < DH; j++)
                            ctx[(b * T + t) * D + hd * DH + j] += s[u] / sum * val[(b * T + u) * D + hd * DH + j];
                }
        std::vector<double> a = affine(ctx, D, v(p + "attn.proj.w"), v(p + "attn.proj.b"), D);
        for (size_t i = 0; i < x.size(); i++) x[i] += a[i];
        y = layer_norm_rows(x, D, v(p + "ln2.gamma"), v(p + "ln2.beta"));
        std::vector<double> h = affine(y, D, v(p + "fc1.w"), v(p + "fc1.b"), F);
        for (double &e : h) e = 0.5 * e * (1 + std::tanh(0.7978845608028654 * (e + 0.044715 * e * e * e)));
        std::vector<double> f = affine(h, F, v(p + "fc2.w"), v(p + "fc2.b"), D);
        for (size_t i = 0; i < x.size(); i++) x[i] += f[i];
    }
    std::vector<double> y = layer_norm_rows(x, D, v("ln_f.gamma"), v("ln_f.beta"));
    expect_close(from_buffer<float>(out[m.logits]), affine(y, D, v("out.w"), v("out.b"), V), 1e-4);
}

// Changing the tokens after position t leaves logits rows 0..t of each sample alone.
void expect_causal(const std::string &spec) {
    SCOPED_TRACE(spec);
    const int64_t B = 2;
    Model m = build_model(spec, B);
    const int64_t T = m.label_elements, V = m.num_classes;
    auto in = random_inputs(m, 14);
    auto base = from_buffer<float>(evaluate_reference(m.graph, in)[m.logits]);
    const int64_t t = T / 2;
    std::vector<int32_t> ids = from_buffer<int32_t>(in.at(m.input));
    for (int64_t b = 0; b < B; b++)
        for (int64_t u = t + 1; u < T; u++) ids[b * T + u] = (ids[b * T + u] + 1) % V;
    in[m.input] = to_buffer(ids);
    auto changed = from_buffer<float>(evaluate_reference(m.graph, in)[m.logits]);
    for (int64_t b = 0; b < B; b++)
        for (int64_t u = 0; u < T; u++) {
            double diff = 0;
            for (int64_t c = 0; c < V; c++)
                diff = std::max(diff, double(std::abs(base[(b * T + u) * V + c] - changed[(b * T + u) * V + c])));
            if (u <= t) EXPECT_EQ(diff, 0.0) << "sample " << b << " position " << u;
            else EXPECT_GT(diff, 1e-6) << "sample " << b << " position " << u;
        }
}

TEST(ModelZooForward, LanguageModelsAreCausal) {
    expect_causal("transformer:layers=2,d_model=8,heads=2,seq=6,vocab=7,ffn=8");
    expect_causal("lstm:layers=2,hidden=4,seq=6,vocab=7,embed=3");
}

// ---- 10 billion parameters ----------------------------------------------------------------

void expect_builds_10b(const std::string &spec, int64_t batch) {
    SCOPED_TRACE(spec);
    auto start = std::chrono::steady_clock::now();
    Model m = build_model(spec, batch);
    EXPECT_GE(m.graph.param_count(), 10'000'000'000);
    std::vector<TensorId> grads = make_training_graph(m.graph, m.loss, OptimizerConfig{});
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 1.0);
    EXPECT_EQ(grads.size(), m.graph.with_role(TensorRole::Param).size());
    for (TensorId g : grads) EXPECT_NE(g, kNoTensor);
    // SGD momentum: one state per parameter, as large as the parameters.
    int64_t state = 0;
    for (TensorId t : m.graph.with_role(TensorRole::OptState)) state += m.graph.tensor(t).type.elements();
    EXPECT_EQ(state, m.graph.param_count());
}

TEST(ModelZoo, TenBillionParametersBuildWithoutMemory) {
    expect_builds_10b("mlp:layers=6,hidden=50000", 64);
    EXPECT_EQ(build_model("mlp:layers=6,hidden=50000", 1).graph.param_count(), mlp_params(6, 50000, 784, 10));
    expect_builds_10b("transformer:layers=50,d_model=4096,heads=32,seq=1024,vocab=50000", 8);
    EXPECT_EQ(build_model("transformer:layers=50,d_model=4096,heads=32,seq=1024,vocab=50000", 1).graph.param_count(),
              transformer_params(50, 4096, 1024, 50000, 4 * 4096));
}

}  // namespace
}  // namespace tessera
