// The scratch buffers of the CUDA custom calls, sized in one place for the
// kernels and for the Python lowering (through the pybind module).
//
// The CUDA calls get their scratch memory as extra results, which the Python
// lowering adds and the primitives do not expose, rather than from XLA's
// ScratchAllocator: a handler that allocates memory while it runs cannot be
// recorded into a CUDA graph, and XLA runs the calls of a jitted function
// from CUDA graphs (command buffers) only if their handlers can be.
// - dweight_partials (backward): the backward splits the rows into
//   `num_partials` segments, sums dy * x * inv_rms over each segment into one
//   row of a float32/float64 matrix (num_partials, row_length), then adds
//   those rows up.
#ifndef GPU_OPS_CUDA_SCRATCH_H_
#define GPU_OPS_CUDA_SCRATCH_H_

#include <algorithm>
#include <cstdint>

namespace gpu_ops {

// Enough segments to keep a GPU's threads busy (one thread team per segment)
// and few enough that the scratch matrix stays a few percent of the traffic:
// about 2M elements of the scratch matrix and at most 1024 segments
// (DweightPartialRowsCap), and at most one per two rows (a segment of one row
// would write a float32 partial row as large as its row, or larger).
// The Python lowering composes the same rule from DweightPartialRowsCap for
// batch sizes that are symbolic when a function is exported.
inline int64_t DweightPartialRowsCap(int64_t row_length) {
  constexpr int64_t kScratchElements = int64_t{1} << 21;
  constexpr int64_t kMaxSegments = 1024;
  return std::clamp<int64_t>(kScratchElements / std::max<int64_t>(row_length, 1),
                             1, kMaxSegments);
}

inline int64_t DweightPartialRows(int64_t rows, int64_t row_length) {
  return std::max<int64_t>(std::min(DweightPartialRowsCap(row_length), rows / 2), 1);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_CUDA_SCRATCH_H_
