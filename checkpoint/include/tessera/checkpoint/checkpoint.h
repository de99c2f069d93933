// Training checkpoints: one safetensors file per run directory, holding every
// parameter and optimizer-state tensor under its graph name (so PyTorch's
// safetensors loader reads the weights by name), plus metadata: the step, the
// RNG state, and the run's identity (model, batch, optimizer, seed, data).
//
// Resuming checks the identity first, so that a checkpoint is never silently
// continued under a different model or hyperparameters. The RNG state is small
// because every random stream in Tessera is counter based: initialisers are a
// function of (seed, tensor name), and the data order of (seed, epoch).
#pragma once

#include <map>
#include <string>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/tensor_store.h"
#include "tessera/graph/graph.h"
#include "tessera/models/zoo.h"

namespace tessera {

struct CheckpointInfo {
    std::map<std::string, std::string> identity;  // must match on resume
    int64_t steps_per_epoch = 0;
    uint64_t seed = 0;
};

std::string checkpoint_path(const std::string &dir);
bool checkpoint_exists(const std::string &dir);

// A run's hold on its checkpoint directory: an exclusive flock on
// DIR/.tessera.lock, released when this goes (or the process ends, however).
class CheckpointDirLock {
public:
    CheckpointDirLock() = default;
    explicit CheckpointDirLock(int fd) : fd_(fd) {}
    CheckpointDirLock(CheckpointDirLock &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    CheckpointDirLock &operator=(CheckpointDirLock &&o) noexcept;
    ~CheckpointDirLock();

private:
    int fd_ = -1;
};

// Creates the checkpoint directory `dir` if missing, takes its lock, and
// clears what a killed run left in it. tessera::Error naming --checkpoint when
// `dir` is a file, lies under one, or cannot be created (a read-only file
// system), and naming the other process when another run holds the lock (two
// runs writing one directory would replace each other's checkpoints).
CheckpointDirLock prepare_checkpoint_dir(const std::string &dir);

// Removes temporary files that a run killed while writing a checkpoint left in
// `dir` (".checkpoint.safetensors.tmp.*"); the checkpoint itself is never
// half-written, because it only ever appears by rename.
void remove_stale_checkpoint_temporaries(const std::string &dir);

// Writes atomically (a temporary file, then a rename). Tensors are whole and
// named as in the single-process graph whatever the ranks hold, so a
// checkpoint written by N ranks resumes on M. Collective when partitioned:
// every rank calls it; the root writes the file.
// `loss_scaler` (loss_scaler.h's state; empty: none) goes to the metadata.
void save_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store,
                     int64_t step, const std::string &loss_scaler = "");

// For an imported model (onnx_import.h): its weights as the PyTorch module's
// state_dict, written atomically to dir/model.safetensors, which
// module.load_state_dict(safetensors.torch.load_file(...), strict=True)
// accepts. Every parameter and batch norm's running statistics are under
// their ONNX names (the state_dict keys) in PyTorch's layout, with each
// batch norm's num_batches_tracked, which the graph does not hold, set to
// `step`. Optimizer state stays in checkpoint.safetensors. Collective like
// save_checkpoint.
std::string state_dict_path(const std::string &dir);
void save_state_dict(const std::string &dir, const Model &m, TensorStore &store, int64_t step);
// PyTorch's BatchNorm counts its training steps next to its running
// statistics; an ONNX export leaves the counter out. X.num_batches_tracked at
// `step` for each running statistic X.running_mean of g.
std::vector<StTensor> step_counters(const Graph &g, int64_t step);

// Whether a checkpoint may lack tensor t of g: batch norm's running
// statistics, which checkpoints before they were tracked do not hold (a
// resumed run starts them from their initial values).
bool optional_in_checkpoint(const Graph &g, TensorId t);

// Loads every Param and OptState tensor (each rank keeps its block) and returns the step.
// Throws tessera::Error naming the file and the mismatch: a different model,
// batch, optimizer or seed; a missing tensor (other than an optional one); a
// wrong shape.
// `loss_scaler`, when given, receives the loss scaler's state (empty when the
// checkpoint holds none: an fp32 or bf16 run's).
int64_t load_checkpoint(const std::string &dir, const CheckpointInfo &info, const Graph &g, TensorStore &store,
                        std::string *loss_scaler = nullptr);

}  // namespace tessera
