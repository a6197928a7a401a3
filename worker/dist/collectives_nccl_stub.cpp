// File: worker/dist/collectives_nccl_stub.cpp
// collectives_nccl() for builds without CUDA (QSYNC_ENABLE_CUDA=OFF): always refuses.
#include "worker/dist/collectives.h"

namespace qsync {

std::string nccl_version_text() { return "no NCCL (built without CUDA)"; }

std::unique_ptr<Collectives> collectives_nccl(Rendezvous& rv, int device) {
  throw CollectiveError("this build has no CUDA: the nccl backend (rank " +
                        std::to_string(rv.config().rank) + ", device " + std::to_string(device) +
                        ") is unavailable; rebuild with -DQSYNC_ENABLE_CUDA=ON on a machine with "
                        "the CUDA toolkit and NCCL, or use the gloo backend");
}

}  // namespace qsync
