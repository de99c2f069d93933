#include "tessera/train/checkpoint_identity.h"

#include <string>

#include <fmt/format.h>

#include "tessera/models/onnx_import.h"
#include "tessera/models/zoo.h"

namespace tessera {

namespace {

std::string float_str(double v) { return fmt::format("{}", v); }

}  // namespace

CheckpointInfo checkpoint_info(const TrainOptions &o, int64_t steps_per_epoch) {
    CheckpointInfo info;
    info.steps_per_epoch = steps_per_epoch;
    info.seed = o.seed;
    const OptimizerConfig &c = o.optimizer;
    info.identity = {
        {"model", canonical_model_spec(o.model)},
        {"batch", std::to_string(o.batch)},
        {"optimizer", optimizer_name(c.kind)},
        {"lr", float_str(c.lr)},
        {"weight_decay", float_str(c.weight_decay)},
        {"seed", std::to_string(o.seed)},
        {"data", o.data},
        {"lr_schedule", lr_schedule_name(o.lr_schedule)},
    };
    // Only when off, so that checkpoints written before the flag existed still resume.
    if (!o.shuffle) info.identity["shuffle"] = "off";
    // An ONNX file is the model: the same name with other contents is another model.
    if (const ModelSpec spec = parse_model_spec(o.model); is_onnx_model(spec))
        info.identity["model_file"] = onnx_file_fingerprint(spec.name);
    if (c.kind == OptimizerConfig::Kind::Sgd) info.identity["momentum"] = float_str(c.momentum);
    else info.identity["adam"] = fmt::format("{},{},{}", c.beta1, c.beta2, c.eps);
    return info;
}

}  // namespace tessera
