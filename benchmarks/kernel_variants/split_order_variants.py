"""The kernel variants of the H200 run in h200_split_order.log (make_variants.py split_order).

Each is a copy of gpu_ops/csrc with one change to the split-row kernels
(rms_norm_split_rows.cu), which take the seed shape's backward (32 rows of
262,144 values) and its float32 forward. Their second pass reads x (and dy)
again, 32 MB in the bfloat16 backward, in the hope that the first pass left
them in L2:
- `rev`: pass 1 takes the rows in the reverse of the order in which pass 2
  reads them, so that pass 2 starts with what pass 1 read last (with an
  L2 that evicts the least recently used lines first, reading in the same
  order as before evicts each line just before it is needed);
- `pf`: each block of the backward's pass 2 loads its next row's dy and x
  before it computes and writes the current one, so that a block's loads of
  its rows (8 in a segment) overlap;
- `pfrev`: both.
"""
from make_variants import SPLIT

COMMIT = "3d1f1b3"

OLD_SUMS_LOOP = """                    float* __restrict__ chunk_sums, int64_t rows,
                    int row_vectors, int chunks) {
  using P = Pack<T>;
  __shared__ TeamSumSlots sums;
  unsigned calls = 0;
  const Shape block{1, kSplitThreads, 1, kVectors};
  StartNextKernel();  // pass 2 loads its vectors while this pass finishes
  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
    const int64_t row = item / chunks;
    const Place at = ChunkPlace(item % chunks, kVectors);
"""
REVERSED_SUMS_LOOP = """                    float* __restrict__ chunk_sums, int64_t rows,
                    int row_vectors, int chunks, int64_t segments,
                    int64_t rows_per_segment) {
  using P = Pack<T>;
  __shared__ TeamSumSlots sums;
  unsigned calls = 0;
  const Shape block{1, kSplitThreads, 1, kVectors};
  StartNextKernel();  // pass 2 loads its vectors while this pass finishes
  // Pass 2 reads row r = s * rows_per_segment + i at step i of segment s,
  // all segments at once: position i * segments + s. This pass takes the
  // positions backwards.
  const int64_t positions = segments * rows_per_segment;
  for (int64_t item = blockIdx.x; item < positions * chunks;
       item += gridDim.x) {
    const int64_t position = positions - 1 - item / chunks;
    const int64_t row = position % segments * rows_per_segment + position / segments;
    if (row >= rows) continue;
    const int64_t chunk = chunks - 1 - item % chunks;
    const Place at = ChunkPlace(chunk, kVectors);
"""
OLD_SUMS_STORE = "    if (threadIdx.x == 0) chunk_sums[item] = total;\n"
REVERSED_SUMS_STORE = "    if (threadIdx.x == 0) chunk_sums[row * chunks + chunk] = total;\n"
OLD_SUMCHUNKS = """                     RowGeometry g, const T* a, const T* b, const T* weight,
                     Split* split) {"""
REVERSED_SUMCHUNKS = """                     RowGeometry g, const T* a, const T* b, const T* weight,
                     int64_t segments, Split* split) {"""
OLD_SUMS_LAUNCH = """  ChunkSumsKernel<T, kVectors>
      <<<Blocks(g.rows * split->chunks), kSplitThreads, 0, stream>>>(
          a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
          split->chunks);"""
REVERSED_SUMS_LAUNCH = """  const int64_t rows_per_segment = CeilDiv(g.rows, segments);
  ChunkSumsKernel<T, kVectors>
      <<<Blocks(segments * rows_per_segment * split->chunks), kSplitThreads, 0,
         stream>>>(a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
                   split->chunks, segments, rows_per_segment);"""
# The forward's pass 2 reads the rows in order: one row per segment.
OLD_FORWARD_SUMS = """        if (auto err = SumChunks<T, kVectors>(stream, b.chunk_sums, g, x, x,
                                              nullptr, &split);"""
REVERSED_FORWARD_SUMS = """        if (auto err = SumChunks<T, kVectors>(stream, b.chunk_sums, g, x, x,
                                              nullptr, g.rows, &split);"""
OLD_BACKWARD_SUMS = """        Split split;
        if (auto err = SumChunks<T, kVectors>(stream, b.chunk_sums, g, dy, x,
                                              w, &split);
            err.failure()) {
          return err;
        }
        // Segments of at least kRowsPerSegment rows, so that each block
        // streams several rows; the first `segments` rows of the scratch
        // matrix hold their partial sums.
        const int64_t segments =
            std::min(b.partials.dimensions()[0],
                     std::max<int64_t>(1, g.rows / kRowsPerSegment));
"""
REVERSED_BACKWARD_SUMS = """        // Segments of at least kRowsPerSegment rows, so that each block
        // streams several rows; the first `segments` rows of the scratch
        // matrix hold their partial sums.
        const int64_t segments =
            std::min(b.partials.dimensions()[0],
                     std::max<int64_t>(1, g.rows / kRowsPerSegment));
        Split split;
        if (auto err = SumChunks<T, kVectors>(stream, b.chunk_sums, g, dy, x,
                                              w, segments, &split);
            err.failure()) {
          return err;
        }
"""
REVERSE = [(OLD_SUMS_LOOP, REVERSED_SUMS_LOOP), (OLD_SUMS_STORE, REVERSED_SUMS_STORE),
           (OLD_SUMCHUNKS, REVERSED_SUMCHUNKS), (OLD_SUMS_LAUNCH, REVERSED_SUMS_LAUNCH),
           (OLD_FORWARD_SUMS, REVERSED_FORWARD_SUMS), (OLD_BACKWARD_SUMS, REVERSED_BACKWARD_SUMS)]

OLD_BACKWARD_ROWS = """    const int64_t end = std::min(rows, (segment + 1) * rows_per_partial);
    for (int64_t row = segment * rows_per_partial; row < end; ++row) {
      P dyv[kVectors], xv[kVectors];
      LoadVectors(reinterpret_cast<const P*>(dy) + row * row_vectors,
                  row_vectors, at, dyv);
      LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors,
                  row_vectors, at, xv);
      WaitForPreviousKernel();  // pass 1 has written the chunk sums
"""
PREFETCH_BACKWARD_ROWS = """    const int64_t first = segment * rows_per_partial;
    const int64_t end = std::min(rows, first + rows_per_partial);
    // This row's dy and x, and the next row's, loaded before this row's are
    // used (the last row loads itself again).
    P dyv[kVectors], xv[kVectors], dyn[kVectors], xn[kVectors];
    auto load = [&](int64_t row, P (&dys)[kVectors], P (&xs)[kVectors]) {
      LoadVectors(reinterpret_cast<const P*>(dy) + row * row_vectors,
                  row_vectors, at, dys);
      LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors,
                  row_vectors, at, xs);
    };
    if (first < end) load(first, dyv, xv);
    WaitForPreviousKernel();  // pass 1 has written the chunk sums
    for (int64_t row = first; row < end; ++row) {
      load(std::min(row + 1, end - 1), dyn, xn);
"""
OLD_BACKWARD_STEP_END = """      StoreInputGradient(dyv, xv, wv, inv, correction,
                         reinterpret_cast<P*>(dx) + row * row_vectors,
                         row_vectors, at);
    }
"""
PREFETCH_BACKWARD_STEP_END = """      StoreInputGradient(dyv, xv, wv, inv, correction,
                         reinterpret_cast<P*>(dx) + row * row_vectors,
                         row_vectors, at);
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
        dyv[k] = dyn[k];
        xv[k] = xn[k];
      }
    }
"""
PREFETCH = [(OLD_BACKWARD_ROWS, PREFETCH_BACKWARD_ROWS), (OLD_BACKWARD_STEP_END, PREFETCH_BACKWARD_STEP_END)]

# name: (what it changes, {file: [(old, new), ...]})
VARIANTS = {
    "base": ("the kernels as committed", {}),
    "rev": ("split rows: pass 1 takes the rows in the reverse of pass 2's order", {SPLIT: REVERSE}),
    "pf": ("split-row backward: pass 2 loads a block's next row before it writes this one",
           {SPLIT: PREFETCH}),
    "pfrev": ("rev and pf", {SPLIT: REVERSE + PREFETCH}),
}
