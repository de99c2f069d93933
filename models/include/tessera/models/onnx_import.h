// ONNX import: a model exported by PyTorch's torch.onnx.export (opsets 13 to
// 17, in training mode so that batch norm and dropout export as such) becomes a
// Tessera model with the zoo's contract (zoo.h), so that everything that trains
// or plans a zoo model takes it: `--model path/to/net.onnx`.
//
//  * Every floating-point initializer becomes a parameter under its ONNX name,
//    which for a PyTorch export is its state_dict key, in PyTorch's layout: a
//    Linear weight stays [out, in] and Gemm's transB is honoured rather than
//    the data transposed. Batch norm's running statistics are not trained (the
//    graph normalises with batch statistics) and are carried as module state.
//  * Shape subgraphs (Shape, Gather, Unsqueeze, Concat, ... on values known at
//    import) are folded to constants, so Reshape targets become attributes.
//  * Each operator maps onto lang/'s operators (docs/onnx.md lists them). An
//    operator, attribute or broadcast the importer does not support is a
//    tessera::Error naming the node, the operator and the attribute, and listing
//    what is supported.
//  * The loss is the mean softmax cross-entropy of the graph's output against
//    integer labels: an output [batch, classes], or [batch, seq, classes] with a
//    label per position. A model with several outputs names one with
//    "net.onnx:output=NAME".
//
// The batch: an input whose first dimension is symbolic (exported with
// dynamic_axes) takes the run's batch size; a fixed one must equal it.
#pragma once

#include <string>
#include <vector>

#include "tessera/models/zoo.h"

namespace tessera {

// Whether a spec's name is an ONNX file to import (it ends in ".onnx").
bool is_onnx_model(const ModelSpec &spec);

// A fingerprint of the file's bytes, "0123456789abcdef (55544 bytes)", so that
// a checkpoint or the ranks of a job can tell one file from another under the
// same name. Throws tessera::Error naming an unreadable file.
std::string onnx_file_fingerprint(const std::string &path);

// Whether this build can import ONNX (it found Debian's libonnx-dev).
bool onnx_import_built();

// Imports spec.name for `batch` samples. Parameters: "output" (which graph
// output is the logits). Throws tessera::Error naming the file for a missing
// or malformed file, an unsupported opset, operator or attribute, and a batch
// the export fixed otherwise.
Model import_onnx(const ModelSpec &spec, int64_t batch);

// The ONNX operators the importer maps onto the graph, and those it folds
// when their inputs are constants; for errors and docs.
std::vector<std::string> onnx_supported_operators();

}  // namespace tessera
