// Internal: JSON form of the strategy types, shared by the build tool that writes
// the table and the runtime that reads it.
#pragma once

#include <nlohmann/json.hpp>

#include "tessera/lang/strategy.h"

namespace tessera {

nlohmann::json to_json(const SymPoly &p);
nlohmann::json to_json(const OpStrategies &s);
SymPoly poly_from_json(const nlohmann::json &j);
OpStrategies op_strategies_from_json(const nlohmann::json &j);

}  // namespace tessera
