#include "tessera/host_threads.h"

#include <algorithm>
#include <thread>

namespace tessera {

int host_planning_threads() {
    return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
}

}  // namespace tessera
