// check_swap_plan's verdict on a plan as text: "passed", or its message.
#pragma once

#include <string>

#include "tessera/error.h"
#include "tessera/swap/swap_plan.h"

namespace tessera::test {

inline std::string check_message(const Graph &g, const SwapPlan &plan) {
    try {
        check_swap_plan(g, plan, "plan");
    } catch (const Error &e) {
        return e.what();
    }
    return "passed";
}

}  // namespace tessera::test
