#include "tessera/program/stream.h"

#include "tessera/error.h"

namespace tessera {

const char *stream_name(StreamKind s) {
    switch (s) {
    case StreamKind::Compute: return "compute";
    case StreamKind::SwapOut: return "swap-out";
    case StreamKind::SwapIn: return "swap-in";
    case StreamKind::Comm: return "comm";
    case StreamKind::Host: return "host";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown stream kind ", static_cast<int>(s));
}

StreamKind stream_from_name(const std::string &name) {
    for (int i = 0; i < kNumStreams; i++)
        if (name == stream_name(static_cast<StreamKind>(i))) return static_cast<StreamKind>(i);
    fail("unknown stream '", name, "'; expected one of compute, swap-out, swap-in, comm, host");
}

}  // namespace tessera
