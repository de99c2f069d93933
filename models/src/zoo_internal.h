// Shared by the zoo's model files: the table entry each model provides, the
// reader that validates its integer parameters, and the common ending (loss,
// outputs, description) of every model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/models/zoo.h"

namespace tessera::zoo {

struct ParamDef {
    std::string name;
    std::string default_text;  // "1024", or a rule such as "4*d_model"
    std::string meaning;
};

// Reads a model's parameters. The set of keys is validated before a model's
// build function runs, so a getter only checks the value. It remembers every
// value it returned, defaults included, for canonical_model_spec.
class Params {
public:
    Params(std::string model, const ModelSpec &spec) : model_(std::move(model)), spec_(spec) {}

    bool given(const std::string &key) const { return spec_.params.count(key) != 0; }
    // The integer value of `key`, or `fallback` when absent; must lie in [min, max].
    int64_t get(const std::string &key, int64_t fallback, int64_t min = 1, int64_t max = kMax) const;

    // Throws tessera::Error "model '<name>': <message>".
    template<typename... Args>
    [[noreturn]] void fail(const Args &...args) const {
        tessera::fail("model '", model_, "': ", args...);
    }

    static constexpr int64_t kMax = 2147483647;  // keeps extent products within int64

    // Every parameter read so far and the value it had.
    const std::map<std::string, std::string> &read() const { return read_; }

private:
    int64_t value(const std::string &key, int64_t fallback, int64_t min, int64_t max) const;

    std::string model_;
    const ModelSpec &spec_;
    mutable std::map<std::string, std::string> read_;
};

// The largest forward graph a model may build, in operators. Every model bounds
// the parameters that multiply its operators (layers, unrolled steps) so that
// it stays within this; the training graph is about three times as large.
// Graphs far beyond it help no one and take minutes and gigabytes to build and
// plan: an LSTM of 100,000 cells (1.7 million operators) took tessera-plan
// 117 s and 12.6 GB, and mlp:layers=2000000000 did not finish.
inline constexpr int64_t kMaxOperators = 50000;

// Streams the arguments into a string ("fc", 3 -> "fc3").
template<typename... Args>
std::string str(const Args &...args) {
    return detail::concat(args...);
}

using BuildFn = Model (*)(const Params &, int64_t batch);

struct ModelDef {
    std::string name;
    std::string summary;  // one line for models_help()
    std::vector<ParamDef> params;
    BuildFn build;
};

const ModelDef &mlp_def();
const ModelDef &cnn_def();
const ModelDef &wresnet_def();
const ModelDef &lstm_def();
const ModelDef &transformer_def();

// Appends the loss softmax_xent(logits, labels), sets the graph outputs and the
// model's fields; `what` starts the description, the parameter count ends it.
void finish(Model &m, Builder &b, Tensor input, Tensor labels, Tensor logits, int64_t label_elements,
            const std::string &what);

// Concatenates `parts` along `axis` with a tree of concat nodes of at most four
// inputs each (the operator's limit).
Tensor concat_all(Builder &b, std::vector<Tensor> parts, int axis);

}  // namespace tessera::zoo
