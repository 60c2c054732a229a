#include "plan/described_gpu.h"

#include <algorithm>

namespace gpu_ops {
namespace {

// The most registers a thread of each kernel may use: the caps that their
// __launch_bounds__ and __maxnreg__ set (rms_norm_fast.cu,
// rms_norm_short_rows.cu, rms_norm_column_slices.cu), the same for every dtype.
int RegisterCap(Kernel kernel) {
  switch (kernel) {
    case Kernel::kColumnSlices: return 65536 / kColumnSliceThreads;
    case Kernel::kShortRowsBackward:
      return 65536 / (kShortRowsThreads * kShortRowsBackwardBlocks);
    default: return 65536 / kMaxThreads;
  }
}

}  // namespace

int64_t DescribedGpu::Resident(Kernel kernel, DType /*dtype*/, const Shape& shape,
                               int shared_bytes) const {
  const int threads = shape.team * shape.teams;
  if (threads < 1 || threads > kMaxThreads || shape.cluster > kMaxCluster ||
      shared_bytes > n_.shared_bytes_per_block ||
      (shape.cluster > 1 && !n_.clusters)) {
    return 0;
  }
  int per_sm = std::min(n_.blocks_per_sm, n_.threads_per_sm / threads);
  per_sm = std::min(per_sm, n_.registers_per_sm / (threads * RegisterCap(kernel)));
  if (shared_bytes > 0) per_sm = std::min(per_sm, n_.shared_bytes_per_sm / shared_bytes);
  // A GPU places a cluster's blocks within one group of SMs (a GPC), which
  // this model does not know: it may count more clusters than run at once,
  // a difference in the number of clusters a plan launches, not in its path.
  return int64_t{per_sm} * n_.sms / shape.cluster;
}

}  // namespace gpu_ops
