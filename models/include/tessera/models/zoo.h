// The model zoo: forward graphs, ending in the loss, built from a spec string
// such as "mlp:layers=3,hidden=1024" or "wresnet:depth=152,width=10".
//
// Every model has the same contract so that the trainer, the planner and the
// tests can treat them alike:
//   * Data tensors "input" (f32 values or i32 token ids, batch first) and
//     "labels" (i32, one class per logits row);
//   * graph outputs "logits" (f32 [rows, num_classes]) and "loss" (f32 [], the
//     mean softmax cross-entropy over the rows);
//   * rows = batch for classifiers, batch * seq for language models, where row
//     b * seq + t predicts the label of token t of sample b.
// Building a model creates shapes and initialisers only; it allocates no tensor
// memory, so a model of billions of parameters builds in milliseconds.
//
// models_help() lists every model with its parameters, their defaults and what
// they mean.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/graph/precision.h"

namespace tessera {

// A parsed spec: the model's name and its key=value parameters, unvalidated.
struct ModelSpec {
    std::string name;
    std::map<std::string, std::string> params;
    bool operator==(const ModelSpec &) const = default;
};

// "NAME" or "NAME:key=value,key=value". Spaces around names, keys and values are
// ignored. Throws tessera::Error quoting the text for a syntax error (empty name,
// an item without '=', an empty key or value, a key given twice). Whether the
// model and its parameters exist is checked by build_model.
ModelSpec parse_model_spec(const std::string &text);

// The canonical text of a spec ("mlp:hidden=512,layers=2"); parses back to `spec`.
std::string model_spec_str(const ModelSpec &spec);

// The spec with every parameter the model uses, defaults (and rules such as
// d_ff=4*d_model) filled in: "mlp:hidden=16" and "mlp:layers=3,hidden=16"
// both give "mlp:classes=10,hidden=16,input=784,layers=3". Two specs build the
// same model exactly when their canonical specs are equal. Throws
// tessera::Error as build_model does.
std::string canonical_model_spec(const std::string &spec);

// Values a model brings for its persistent tensors (an imported model's trained
// weights, a constant's data), by tensor name; zoo models draw theirs from the
// seed instead (exec/init.h).
struct TensorValues {
    DType dtype = DType::F32;
    std::vector<float> f32;      // dtype F32
    std::vector<int32_t> i32;    // dtype I32
    bool operator==(const TensorValues &) const = default;
};

struct Model {
    Graph graph;
    TensorId input = kNoTensor, labels = kNoTensor, logits = kNoTensor, loss = kNoTensor;
    int64_t num_classes = 0;     // logits' last extent; for language models also the vocabulary,
                                 // so token ids in `input` lie in [0, num_classes)
    int64_t label_elements = 1;  // labels per sample: 1 for classifiers, seq for language models
    std::string description;     // "mlp 784-1024-1024-10 (1.86M parameters)"
    // Imported models only (onnx_import.h): initial values of parameters,
    // batch norm's running statistics and constants.
    bool imported = false;
    std::map<std::string, TensorValues> values;
};

// Builds the forward graph for `batch` samples. A spec whose name ends in
// ".onnx" is a file to import (onnx_import.h). Throws tessera::Error for an
// unknown model (listing the models), an unknown parameter (listing the model's
// parameters), or a bad value (saying what is valid), and for batch < 1.
Model build_model(const ModelSpec &spec, int64_t batch);
Model build_model(const std::string &spec, int64_t batch);

// Applies the precision policy (graph/precision.h) to the model's forward
// graph, keeping input, labels, logits and loss pointing at their tensors.
void apply_precision(Model &m, Precision p, GradReduce grad = GradReduce::F32);

// The names of the models, in the order models_help() lists them.
std::vector<std::string> model_names();

// Every model, its parameters, their defaults and meaning; for --help and errors.
std::string models_help();

// "950", "12.3K", "1.86M", "6.04B": a parameter count for descriptions.
std::string format_count(int64_t n);

}  // namespace tessera
