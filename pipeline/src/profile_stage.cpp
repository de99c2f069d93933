#include "tessera/pipeline/profile_stage.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "tessera/exec/profile.h"
#include "tessera/progress.h"

namespace tessera {

OpTimes profile_op_times(const Graph &g, const std::vector<NodeId> &order, Device &device, bool show_progress) {
    ProfileOptions po;
    if (show_progress) {
        auto out = std::make_shared<ProgressLine>(true, 0.1, std::cerr);
        po.progress = [out](int done, int total) {
            out->show(fmt::format("profiling operators {}/{}", done, total), done == total);
            if (done == total) out->finish();
        };
    }
    po.skip_oversized_optimizer = true;
    OpTimes t;
    t.node_time_s = profile_nodes(g, order, device, po);
    t.host_node_time_s = profile_host_nodes(g, order, po.repeats);
    const int64_t probe = std::min<int64_t>(device.arena_bytes() / 64 * 64, int64_t{64} << 20);
    t.h2d_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::HostToDevice, probe);
    t.d2h_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::DeviceToHost, probe);
    return t;
}

OpTimer device_profiler(DeviceSource source, bool show_progress) {
    return [source = std::move(source), show_progress](const Graph &g, const std::vector<NodeId> &order,
                                                       int64_t budget) {
        return profile_op_times(g, order, source(budget), show_progress);
    };
}

}  // namespace tessera
