// The profile stage: the swap planner's operator times measured on the
// device a run trains on (exec/profile.h): each operator of the rank's graph
// alone, the optimizer's updates on the host, and the host link each way.
// plan_run runs it, through the OpTimer device_profiler() makes, when the run
// swaps and no swap plans were given; its result and its seconds are the
// run's SwapPlans::times and SwapPlans::times_s, logged as the `times` stage.
//
// The pipeline's one part that needs a device, so it is a library of its own
// (tessera_pipeline_device): tessera-plan and the predictor link only
// tessera_pipeline and take the roofline's times instead.
//
//   DeviceSlot slot(choice);    // makes the device when first asked
//   RunPlan run = plan_run(spec, device_profiler(slot.source(), show_progress));
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/exec/device.h"
#include "tessera/graph/graph.h"
#include "tessera/pipeline/rank_stages.h"

namespace tessera {

// The run's device with an arena of `arena_bytes`: made on the first call,
// the same one after.
using DeviceSource = std::function<Device &(int64_t arena_bytes)>;

// The operators of `order` timed on `device` (optimizers too large for its
// arena get 0: the planner has checked the budget, so those run on the host),
// the optimizer's updates timed on the host, and the copy bandwidth each way
// (a probe of at most 64 MiB). `show_progress` draws a progress line on stderr.
OpTimes profile_op_times(const Graph &g, const std::vector<NodeId> &order, Device &device, bool show_progress);

// profile_op_times on the device `source` makes with the budget as its arena.
OpTimer device_profiler(DeviceSource source, bool show_progress);

}  // namespace tessera
