// How many random cases a property test runs. Every case in the main test
// run; under a sanitizer (scripts/sanitize.sh sets TESSERA_TEST_TRIALS=tenth)
// a tenth, at least `least`: the instrumented build runs 10 to 30 times
// slower, and what it looks for (memory and thread errors) shows on the code
// paths a tenth of the cases already take.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>

namespace tessera::test {

inline int trials(int all, int least = 1) {
    const char *v = std::getenv("TESSERA_TEST_TRIALS");
    if (v == nullptr || std::string(v) != "tenth") return all;
    return std::max(least, all / 10);
}

}  // namespace tessera::test
