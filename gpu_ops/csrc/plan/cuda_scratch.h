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
// - chunk_sums (forward and backward): a float32 vector of one sum per chunk
//   of a row for the split-row kernels (rms_norm_split_rows.cu), which take
//   only rows longer than kSplitRowsAbove; empty for shorter rows. The grid
//   forward (rms_norm_grid_rows.cu) keeps a sum per row and block in it, and
//   leaves inputs whose sums it cannot hold to the other kernels.
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

// The split-row kernels: blocks of kSplitThreads threads, each thread taking
// up to kSplitForwardValues (forward) or kSplitBackwardValues (backward)
// values of a row; a chunk is what one block takes.
constexpr int kSplitThreads = 256;
constexpr int kSplitForwardValues = 16;
constexpr int kSplitBackwardValues = 8;
// Rows of up to this many values never take the split-row kernels: the
// fast kernels hold them in one block on every GPU with at least 99 KiB of
// shared memory a block. (Longer float32 rows need more in the backward: an
// A100 cannot ring a float32 row of 7,000 values, so those take split rows.)
constexpr int64_t kSplitRowsAbove = 4096;

// The chunk_sums vector holds one float per chunk of every row, for the
// smaller (backward) chunks, which the forward's fewer chunks fit in too:
// ChunkSumsPerRow floats a row.
inline int64_t ChunkSumsPerRow(int64_t row_length) {
  if (row_length <= kSplitRowsAbove) return 0;
  constexpr int64_t kChunk = int64_t{kSplitThreads} * kSplitBackwardValues;
  return (row_length + kChunk - 1) / kChunk;
}

inline int64_t ChunkSumsLength(int64_t rows, int64_t row_length) {
  return rows * ChunkSumsPerRow(row_length);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_CUDA_SCRATCH_H_
