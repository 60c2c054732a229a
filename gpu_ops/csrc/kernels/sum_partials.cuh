// The backward's last step, for every backward kernel: the weight gradient
// as the column sums of the partial rows that the backward's blocks (or
// teams) wrote, a row each, so that no two of them add into one value.
#ifndef GPU_OPS_SUM_PARTIALS_CUH_
#define GPU_OPS_SUM_PARTIALS_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/row_geometry.h"

// Everything here is inline or a template: each file that includes this
// header may use it, and the linker keeps one copy.
namespace gpu_ops {

// kValues consecutive columns of a partial row, loaded at once: four
// float32 columns are one 16-byte load.
template <typename A, int kValues>
struct alignas(sizeof(A) * kValues) Columns {
  A v[kValues];

  __device__ void Add(const Columns& other) {
#pragma unroll
    for (int k = 0; k < kValues; ++k) v[k] += other.v[k];
  }
};

// dw = the column sums of partials (num_partials rows of `columns` Columns).
// A block is blockDim.x Columns by blockDim.y lanes (a power of two): lane l
// adds up partial rows l, l + blockDim.y, ...; then the lanes' sums are
// added up pairwise in shared memory, always in the same order.
template <typename W, typename A, int kValues>
__global__ void __launch_bounds__(kMaxThreads)
    SumPartialsKernel(const Columns<A, kValues>* __restrict__ partials, W* __restrict__ dw,
                      int64_t num_partials, int64_t columns) {
  __shared__ Columns<A, kValues> sums[kMaxThreads];  // [blockDim.y][blockDim.x]
  WaitForPreviousKernel();  // the backward that wrote the partial rows
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  Columns<A, kValues> sum = {};
  if (col < columns) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < num_partials; p += blockDim.y) {
      sum.Add(partials[p * columns + col]);
    }
  }
  const int slot = threadIdx.y * blockDim.x + threadIdx.x;
  sums[slot] = sum;
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) sums[slot].Add(sums[slot + half * blockDim.x]);
  }
  if (threadIdx.y == 0 && col < columns) {
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      dw[kValues * col + k] = Storage<W>::From(sums[slot].v[k]);
    }
  }
}

// dw = the sum of the rows of `partials` (num_partials by row_length, float32
// or float64), in W. Each lane adds up about 4 partial rows, with up to 128
// lanes per column: the loads of a thread are independent, so many are in
// flight at once. A block takes at most 32 Columns (a warp's 512 bytes of
// each float32 partial row), so that the few partial rows of a small batch
// still spread over many SMs. Launched to start while the backward before it
// finishes (LaunchDependent).
template <typename W, typename A>
ffi::Error SumPartials(cudaStream_t stream, const A* partials, W* dw, int64_t num_partials,
                       int64_t row_length) {
  int lanes = 1;
  while (lanes < 128 && lanes * 4 < num_partials) lanes *= 2;
  const dim3 block(std::min(kWarpSize, kMaxThreads / lanes), lanes);
  const auto launch = [&](auto values) {
    constexpr int kValues = decltype(values)::value;
    const int64_t columns = row_length / kValues;
    return LaunchDependent(stream, GridSize(CeilDiv(columns, int64_t{block.x}), kMaxGrid),
                           block, "launching the weight-gradient reduction kernel",
                           SumPartialsKernel<W, A, kValues>,
                           reinterpret_cast<const Columns<A, kValues>*>(partials), dw,
                           num_partials, columns);
  };
  // Partial rows of whole 16-byte vectors (the fast kernels' always are):
  // four float32 columns a thread.
  if constexpr (std::is_same_v<A, float>) {
    if (row_length % 4 == 0) return launch(std::integral_constant<int, 4>{});
  }
  return launch(std::integral_constant<int, 1>{});
}

}  // namespace gpu_ops

#endif  // GPU_OPS_SUM_PARTIALS_CUH_
