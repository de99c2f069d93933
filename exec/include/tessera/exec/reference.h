// A plain reference evaluator: one heap buffer per tensor, nodes run in graph
// order with lang's CPU kernels. No arena, no streams, no memory plan. Tests use
// it as the independent reference for the executor, and gradient checks use it
// to evaluate models in double-checked small sizes.
#pragma once

#include <cstddef>
#include <cstring>
#include <map>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

using HostBuffer = std::vector<std::byte>;

// Values of every tensor after running all nodes once. `values` must hold every
// Data, Param and OptState tensor (sizes are checked); the rest are computed.
// In-place updates are not applied: w' is a separate buffer from w.
std::vector<HostBuffer> evaluate_reference(const Graph &g, std::map<TensorId, HostBuffer> values);

template<typename T>
HostBuffer to_buffer(const std::vector<T> &v) {
    HostBuffer b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

template<typename T>
std::vector<T> from_buffer(const HostBuffer &b) {
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}

}  // namespace tessera
