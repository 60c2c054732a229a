// How many partial sums the CUDA backward uses for the weight gradient.
//
// The CUDA backward splits the rows into `num_partials` segments, sums
// dy * x * inv_rms over each segment into one row of a float32/float64
// scratch matrix (num_partials, row_length), then adds those rows up. The
// matrix is an extra result of the CUDA custom call; its height is chosen
// here, in one place, and exposed to the Python lowering.
#ifndef GPU_OPS_DWEIGHT_PARTIALS_H_
#define GPU_OPS_DWEIGHT_PARTIALS_H_

#include <algorithm>
#include <cstdint>

namespace gpu_ops {

// About 256 rows per segment, between 1 and 1024 segments.
inline int64_t DweightPartialRows(int64_t rows) {
  constexpr int64_t kRowsPerSegment = 256;
  constexpr int64_t kMaxSegments = 1024;
  return std::clamp<int64_t>((rows + kRowsPerSegment - 1) / kRowsPerSegment,
                             1, kMaxSegments);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_DWEIGHT_PARTIALS_H_
