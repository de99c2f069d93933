// The NCCL entry points in a build without NCCL: they say so.
#include "tessera/comm/communicator.h"
#include "tessera/error.h"

namespace tessera {

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int, bool) {
    fail("rank ", bootstrap.rank(), ": make_nccl_communicator: built without NCCL (configure with CUDA and NCCL "
         "installed); use the MPI communicator with host buffers instead");
}

}  // namespace tessera
