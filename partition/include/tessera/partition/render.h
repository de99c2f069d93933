// Human views of plans: a text table, Graphviz DOT, one self-contained HTML page,
// and a side-by-side comparison of strategies.
#pragma once

#include <string>
#include <vector>

#include "tessera/partition/plan.h"

namespace tessera {

// The cuts outermost first, each with the machine level it runs over:
// "2 over node, then 2 over gpu".
std::string cuts_str(const Plan &p);

std::string plan_table(const Plan &p);
std::string plan_dot(const Plan &p);
std::string plan_html(const Plan &p);
// One row per plan: communication bytes, predicted time, memory per device.
std::string compare_table(const std::vector<Plan> &plans);
std::string compare_json(const std::vector<Plan> &plans, int indent = 2);

}  // namespace tessera
