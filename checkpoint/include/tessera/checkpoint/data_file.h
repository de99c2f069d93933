// A dataset from a safetensors file (--data FILE.safetensors), for models
// whose data is one's own: tensors "input" ([N, ...], f32 values or int32/int64
// token ids) and "labels" ([N] or [N, T], int32 or int64), and optionally
// "test_input" and "test_labels" for the evaluation (without them the
// training set is evaluated). Samples are visited in file order with
// --no-shuffle, which is how a test feeds PyTorch and Tessera the same batches.
#pragma once

#include <string>

#include "tessera/models/data.h"

namespace tessera {

bool is_data_file(const std::string &data);  // ends in ".safetensors"

struct DataFileSplit {
    Dataset train, test;
};

// Throws tessera::Error naming the file and the tensor: a missing tensor, an
// unsupported dtype, sample counts that differ, a negative label.
DataFileSplit load_data_file(const std::string &path);

}  // namespace tessera
