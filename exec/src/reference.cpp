#include "tessera/exec/reference.h"

#include "tessera/error.h"
#include "tessera/lang/kernels.h"

namespace tessera {

std::vector<HostBuffer> evaluate_reference(const Graph &g, std::map<TensorId, HostBuffer> values) {
    std::vector<HostBuffer> buf(g.num_tensors());
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        auto it = values.find(t);
        if (info.producer == kNoNode) {
            TESSERA_CHECK(it != values.end(), "evaluate_reference: no value for '", info.name, "'");
            TESSERA_CHECK(static_cast<int64_t>(it->second.size()) == info.type.bytes(),
                          "evaluate_reference: '", info.name, "' has ", it->second.size(),
                          " bytes, expected ", info.type.bytes(), " for ", type_str(info.type));
            buf[t] = std::move(it->second);
        } else {
            buf[t].assign(info.type.bytes(), std::byte{0});
        }
    }
    for (const Node &n : g.nodes()) {
        std::vector<TensorRef> in, out;
        for (TensorId t : n.inputs) in.push_back({buf[t].data(), g.tensor(t).type});
        for (TensorId t : n.outputs) out.push_back({buf[t].data(), g.tensor(t).type});
        run_op(n.call, in, out);
    }
    return buf;
}

}  // namespace tessera
