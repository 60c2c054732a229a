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

// Enough segments to keep a GPU's threads busy (one thread team per segment)
// and few enough that the scratch matrix stays a few percent of the traffic:
// about 2M elements of the scratch matrix, at most 1024 segments and at most
// one per row.
inline int64_t DweightPartialRows(int64_t rows, int64_t row_length) {
  constexpr int64_t kScratchElements = int64_t{1} << 21;
  constexpr int64_t kMaxSegments = 1024;
  const int64_t wanted = kScratchElements / std::max<int64_t>(row_length, 1);
  return std::clamp<int64_t>(std::min({wanted, kMaxSegments, rows}), 1,
                             kMaxSegments);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_DWEIGHT_PARTIALS_H_
