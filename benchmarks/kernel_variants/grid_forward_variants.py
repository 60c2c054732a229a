"""The kernel variants of the H100 run in h100_grid_forward.log (make_variants.py grid_forward).

The seed shape's forward (bfloat16 32 x 262,144) takes the shared-row
forward: a cluster of 8 blocks holds a row, so each of the 32 clusters
loads its row's whole weight, 512 KiB, 16 MiB in all from L2, and loads it
just before its stores (h200_shared_balance.log: 1.4 µs). The grid
backward instead lays every row over the whole grid, each block a slice of
columns of every row, so a block loads its weight slice once. `gridfwd` is
the forward in that layout: a cooperative launch of 1024-thread blocks, each
holding its columns of every row (the first rows in registers, the rest in
shared memory, loaded with cp.async), adding up each row's squares over its
columns into `chunk_sums[row][block]`; after a grid-wide barrier each block
adds a row's sums over the blocks in order and writes its part of y. It
takes the rows of TrySharedRowForward whose blocks all fit on the GPU at
once and whose sums fit the chunk_sums scratch (float32 rows of 262,144 among
them, which base leaves to the split-row kernels); other rows as before.
"""
from make_variants import SHARED

COMMIT = "642113e"

GRID_FORWARD_KERNEL = r"""
constexpr int kGridForwardThreads = 1024;
// Rows a thread of the grid forward holds: the first kGridRegisterRows in
// registers, the rest in shared memory (13 vectors, 208 KiB a block, at most).
constexpr int kMaxGridForwardRows = 16;
constexpr int kGridRegisterRows = 3;

// Block b takes column vectors b * columns ... b * columns + columns - 1 of
// every row; thread t takes column vector t % columns of rows t / columns +
// j * groups (j < rows_per_thread), groups = blockDim.x / columns.
template <typename T>
__global__ void __launch_bounds__(kGridForwardThreads, 1)
    GridForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                      T* __restrict__ y, float* __restrict__ inv_rms,
                      float* __restrict__ row_sums, int rows, int row_vectors,
                      int columns, int rows_per_thread, float inverse_length,
                      float eps) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 grid_memory[];
  constexpr int kMaxRows =
      kMaxGridForwardRows * kGridForwardThreads / kWarpSize;
  __shared__ float warp_sums[kMaxGridForwardRows]
                            [kGridForwardThreads / kWarpSize];
  __shared__ float row_inv[kMaxRows];
  const int groups = blockDim.x / columns;
  const int group = threadIdx.x / columns;
  const int column = blockIdx.x * columns + threadIdx.x % columns;
  const bool in_row = column < row_vectors;
  const Place at{0, 0, column, 0};
  auto row_of = [&](int j) { return group + j * groups; };
  auto holds = [&](int j) {
    return in_row && j < rows_per_thread && row_of(j) < rows;
  };
  P* slots = reinterpret_cast<P*>(grid_memory);
  auto slot = [&](int j) {
    return slots + (j - kGridRegisterRows) * blockDim.x + threadIdx.x;
  };
  const P* xp = reinterpret_cast<const P*>(x);
  P registers[kGridRegisterRows];
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    const int64_t at_row = int64_t{row_of(j)} * row_vectors + column;
    if (j < kGridRegisterRows) {
      registers[j] = VectorOrZeros(holds(j), xp + at_row);
    } else if (holds(j)) {
      __pipeline_memcpy_async(slot(j), xp + at_row, sizeof(P));
    }
    __pipeline_commit();
  }
  auto x_of = [&](int j) {
    return j < kGridRegisterRows ? registers[j] : *slot(j);
  };
  const P wv[1] = {
      VectorOrZeros(in_row, reinterpret_cast<const P*>(w) + column)};
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    __pipeline_wait_prior(kMaxGridForwardRows - 1 - j);
    float sum = 0;
    if (holds(j)) {
      const P v[1] = {x_of(j)};
      sum = SumSquares(v);
    }
    sum = WarpSum(sum);  // a warp lies within one group: same rows
    if (lane == 0 && j < rows_per_thread) warp_sums[j][warp] = sum;
  }
  __syncthreads();
  const int warps_per_group = columns / kWarpSize;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int first_warp = (r % groups) * warps_per_group;
    float sum = 0;
    for (int k = 0; k < warps_per_group; ++k) {
      sum += warp_sums[r / groups][first_warp + k];
    }
    row_sums[int64_t{r} * gridDim.x + blockIdx.x] = sum;
  }
  cooperative_groups::this_grid().sync();
  for (int r = warp; r < rows; r += blockDim.x / kWarpSize) {
    float sum = 0;
    const float* sums = row_sums + int64_t{r} * gridDim.x;
#pragma unroll 4
    for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {
      sum += sums[b];
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      const float inv = rsqrtf(sum * inverse_length + eps);
      row_inv[r] = inv;
      if (blockIdx.x == 0) inv_rms[r] = inv;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    if (!holds(j)) continue;
    const int row = row_of(j);
    const P v[1] = {x_of(j)};
    StoreNormalised(v, wv, row_inv[row],
                    reinterpret_cast<P*>(y) + int64_t{row} * row_vectors,
                    row_vectors, at);
  }
}

template <typename T>
std::optional<ffi::Error> TryGridForward(cudaStream_t stream,
                                         const ForwardBuffers& b,
                                         RowGeometry g, double eps) {
  if (b.chunk_sums.element_type() != ffi::DataType::F32 ||
      g.rows > int64_t{kMaxGridForwardRows} * kGridForwardThreads / kWarpSize) {
    return std::nullopt;
  }
  const auto kernel = GridForwardKernel<T>;
  const int row_vectors = static_cast<int>(g.row_length / Pack<T>::kSize);
  const int rows = static_cast<int>(g.rows);
  for (int columns = kWarpSize; columns <= kGridForwardThreads; columns *= 2) {
    const int groups = kGridForwardThreads / columns;
    const int rows_per_thread = static_cast<int>(CeilDiv(rows, groups));
    if (rows_per_thread > kMaxGridForwardRows) return std::nullopt;
    const int64_t blocks = CeilDiv(row_vectors, columns);
    const int shared_bytes =
        std::max(1, rows_per_thread - kGridRegisterRows) * kGridForwardThreads * 16;
    const Shape shape{1, kGridForwardThreads, 1, rows_per_thread};
    if (blocks > ResidentGroups(kernel, shape, shared_bytes)) continue;
    if (static_cast<int64_t>(b.chunk_sums.element_count()) < blocks * rows) {
      return std::nullopt;
    }
    cudaLaunchAttribute no_cluster[1];
    cudaLaunchConfig_t config =
        LaunchConfig(shape, blocks, shared_bytes, stream, no_cluster);
    cudaLaunchAttribute cooperative[1];
    cooperative[0].id = cudaLaunchAttributeCooperative;
    cooperative[0].val.cooperative = 1;
    config.attrs = cooperative;
    config.numAttrs = 1;
    return CudaStatus(
        cudaLaunchKernelEx(&config, kernel,
                           static_cast<const T*>(b.x.untyped_data()),
                           static_cast<const T*>(b.w.untyped_data()),
                           static_cast<T*>(b.y.untyped_data()),
                           static_cast<float*>(b.inv_rms.untyped_data()),
                           static_cast<float*>(b.chunk_sums.untyped_data()),
                           rows, row_vectors, columns, rows_per_thread,
                           Reciprocal(g.row_length), static_cast<float>(eps)),
        "launching the grid forward kernel");
  }
  return std::nullopt;
}

}  // namespace
"""

GRID_FORWARD = [
    ("#include <cuda_bf16.h>\n", "#include <cooperative_groups.h>\n#include <cuda_bf16.h>\n"),
    ("\n}  // namespace\n\nstd::optional<ffi::Error> TrySharedRowForward(",
     GRID_FORWARD_KERNEL + "\nstd::optional<ffi::Error> TrySharedRowForward("),
    ("        using T = typename decltype(tag)::type;\n"
     "        const auto kernel = SharedRowForwardKernel<T>;\n",
     "        using T = typename decltype(tag)::type;\n"
     "        if (auto launched = TryGridForward<T>(stream, b, g, eps)) {\n"
     "          return launched;\n"
     "        }\n"
     "        const auto kernel = SharedRowForwardKernel<T>;\n"),
]

VARIANTS = {
    "base": ("the kernels of 642113e (those of 4ca2340)", {}),
    "gridfwd": ("the forward of rows the whole grid holds at once in the grid backward's layout",
                {SHARED: GRID_FORWARD}),
    "gridfwd8": ("the same with 8 rows a thread in registers, the rest in shared memory",
                 {SHARED: [*GRID_FORWARD, ("constexpr int kGridRegisterRows = 3;",
                                           "constexpr int kGridRegisterRows = 8;")]}),
}
