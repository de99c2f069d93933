// Whole tensors of the training graph, however the ranks hold them. The
// training loop, evaluation and checkpoints read and write tensors of the
// single-process graph by their TensorId there; a TensorStore maps that onto
// one executor (one process) or onto each rank's block (partitioned).
#pragma once

#include <cstddef>
#include <memory>

#include "tessera/comm/communicator.h"
#include "tessera/exec/executor.h"
#include "tessera/partition/lower.h"

namespace tessera {

class TensorStore {
public:
    virtual ~TensorStore() = default;
    // Collective when partitioned: every rank calls it for the same tensor in
    // the same order. The whole tensor arrives on the root; elsewhere `host`
    // is left alone.
    virtual void read(TensorId t, void *host, size_t bytes) = 0;
    // Every rank passes the whole tensor; each keeps its block.
    virtual void write(TensorId t, const void *host, size_t bytes) = 0;
    virtual bool root() const = 0;
};

// A floating tensor of `g` as f32 values (bf16 and f16 widened), read from
// `store` into `out` (sized to its elements); collective as read() is.
void read_as_f32(TensorStore &store, const Graph &g, TensorId t, std::vector<float> &out);

// One process: the executor runs the training graph itself.
class DirectStore final : public TensorStore {
public:
    explicit DirectStore(Executor &ex) : ex_(ex) {}
    void read(TensorId t, void *host, size_t bytes) override { ex_.read(t, host, bytes); }
    void write(TensorId t, const void *host, size_t bytes) override { ex_.write(t, host, bytes); }
    bool root() const override { return true; }

private:
    Executor &ex_;
};

// One rank of a partitioned job: the executor runs this rank's lowered graph.
// Reads gather every rank's block on rank 0 (point to point, outside the
// training steps, so a step's byte count is the plan's alone).
class ShardedStore final : public TensorStore {
public:
    ShardedStore(const Graph &whole, const DeviceGraph &dg, Executor &ex, Communicator &comm)
        : whole_(whole), dg_(dg), ex_(ex), comm_(comm) {}
    void read(TensorId t, void *host, size_t bytes) override;
    void write(TensorId t, const void *host, size_t bytes) override;
    bool root() const override { return comm_.rank() == 0; }

private:
    const Graph &whole_;
    const DeviceGraph &dg_;
    Executor &ex_;
    Communicator &comm_;
    std::vector<std::byte> block_;
};

}  // namespace tessera
