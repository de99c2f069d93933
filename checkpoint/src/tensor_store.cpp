#include "tessera/checkpoint/tensor_store.h"

#include "tessera/error.h"
#include "tessera/half.h"

namespace tessera {

void ShardedStore::read(TensorId t, void *host, size_t bytes) {
    const TensorInfo &info = whole_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "read of '", info.name, "': asked for ", bytes,
                  " bytes but ", type_str(info.type), " has ", info.type.bytes());
    const TensorId local = dg_.local[t];
    TESSERA_INTERNAL_ASSERT(local != kNoTensor, "rank ", comm_.rank(), " holds no block of '", info.name, "'");
    const size_t elem = dtype_size(info.type.dtype);
    const Box whole = Box::whole(info.type.shape);
    const Box &mine = dg_.box[local];
    block_.resize(static_cast<size_t>(mine.elements()) * elem);
    ex_.read(local, block_.data(), block_.size());
    if (comm_.rank() != 0) {
        comm_.send(block_.data(), block_.size(), 0);
        return;
    }
    copy_box(block_.data(), mine, host, whole, mine, elem);
    // Rank 0 holds a longest block, so the buffer fits any other rank's
    // (an uneven split's later blocks are one row shorter).
    for (int r = 1; r < comm_.size(); r++) {
        const Box theirs = dg_.held_by(t, r);
        TESSERA_INTERNAL_ASSERT(theirs.elements() <= mine.elements(), "rank ", r, "'s block of '", info.name,
                                "' is longer than rank 0's");
        comm_.recv(block_.data(), static_cast<size_t>(theirs.elements()) * elem, r);
        // A replicated tensor keeps rank 0's copy (ddp's running statistics
        // differ by rank; every other replicated tensor is the same on all).
        if (!(theirs == whole && mine == whole)) copy_box(block_.data(), theirs, host, whole, theirs, elem);
    }
}

void ShardedStore::write(TensorId t, const void *host, size_t bytes) {
    const TensorInfo &info = whole_.tensor(t);
    TESSERA_CHECK(static_cast<int64_t>(bytes) == info.type.bytes(), "write to '", info.name, "': got ", bytes,
                  " bytes but ", type_str(info.type), " takes ", info.type.bytes());
    const TensorId local = dg_.local[t];
    TESSERA_INTERNAL_ASSERT(local != kNoTensor, "rank ", comm_.rank(), " holds no block of '", info.name, "'");
    const size_t elem = dtype_size(info.type.dtype);
    // The tensor's own block, and for a fed tensor every other block of it
    // that lowering gave an input of its own (Lowerer::add_fed_block).
    for (TensorId id = 0; id < dg_.graph.num_tensors(); id++) {
        if (id != local && (dg_.source[id] != t || dg_.graph.tensor(id).producer != kNoNode)) continue;
        const Box &box = dg_.box[id];
        block_.resize(static_cast<size_t>(box.elements()) * elem);
        copy_box(host, Box::whole(info.type.shape), block_.data(), box, box, elem);
        ex_.write(id, block_.data(), block_.size());
    }
}

void read_as_f32(TensorStore &store, const Graph &g, TensorId t, std::vector<float> &out) {
    const TensorType &type = g.tensor(t).type;
    out.resize(static_cast<size_t>(type.elements()));
    if (type.dtype == DType::F32) return store.read(t, out.data(), out.size() * sizeof(float));
    TESSERA_INTERNAL_ASSERT(is_half(type.dtype), "read_as_f32: '", g.tensor(t).name, "' is ", type_str(type));
    std::vector<uint16_t> held(out.size());
    store.read(t, held.data(), held.size() * sizeof(uint16_t));
    for (size_t k = 0; k < held.size(); k++)
        out[k] = type.dtype == DType::BF16 ? float_from_bf16(held[k]) : float_from_f16(held[k]);
}

}  // namespace tessera
