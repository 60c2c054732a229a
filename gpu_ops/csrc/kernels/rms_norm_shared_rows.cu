// The RMS norm forward for rows too long for a cluster's registers that fit
// in its shared memory at 64 KiB a block: 16-bit rows of 131,073 to 262,144
// values (512 KiB a row: 64 KiB in each block of a cluster of 8), such as
// 1,024 rows of 512 x 512 bfloat16 values. (Inputs the whole GPU holds at
// once, the seed tutorial's 32 such rows among them, go to
// rms_norm_grid_rows.cu.)
//
// The split-row forward (rms_norm_split_rows.cu) reads such rows twice, in
// two kernels. Here a cluster of blocks takes a row at a time: each thread
// copies its vectors of the row into its own slots of shared memory
// (cp.async, all in flight at once), adds up their squares, and the
// cluster's blocks add up their sums through each other's shared memory
// (TeamSum); then each thread normalises its slots and writes y. x is read
// once, in one kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// Blocks of kSharedRowThreads threads holding up to kMaxSharedRowVectors
// vectors each (rms_norm_plan.h): at most 64 KiB a block, so that an SM
// holds several blocks and one block's loads overlap another's sums and
// stores. An H200 holds three such blocks an SM and so runs 45 clusters of 8
// at once; with at most two an SM it would run 30, fewer than the seed
// shape's 32 rows.

// Cluster c normalises row c, then row c + clusters, and so on. Thread t's
// vector k of the row sits in slot k * blockDim.x + t; a thread reads back
// only its own slots, so it waits for its own copies and never for the
// block.
template <typename T>
__global__ void __launch_bounds__(kSharedRowThreads)
    SharedRowForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                           T* __restrict__ y, float* __restrict__ inv_rms,
                           int64_t rows, int row_vectors, Shape shape,
                           float row_length, float eps) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 row_memory[];
  __shared__ TeamSumSlots sums;
  StartClusterSums<true>(sums);
  unsigned calls = 0;
  const Place at = ThreadPlace(shape);
  P* slots = reinterpret_cast<P*>(row_memory);
  auto slot = [&](int k) { return slots + k * blockDim.x + threadIdx.x; };
  // The thread's vectors go one by one (shape.vectors is known only at run
  // time), each as an array of one at its own place in the row.
  auto vector_at = [&](int k) {
    return Place{0, 0, at.first + k * at.stride, 0};
  };
  // Slot k, or zeros past the row's end.
  auto slot_vector = [&](int k) {
    return VectorOrZeros(vector_at(k).first < row_vectors, slot(k));
  };
  const P* xp = reinterpret_cast<const P*>(x);
  const P* wp = reinterpret_cast<const P*>(w);
  P* yp = reinterpret_cast<P*>(y);
  const int64_t clusters = gridDim.x / shape.cluster;
  // The loop runs the same number of times in every block of a cluster.
  for (int64_t row = blockIdx.x / shape.cluster; row < rows; row += clusters) {
    for (int k = 0; k < shape.vectors; ++k) {
      const int c = vector_at(k).first;
      if (c < row_vectors) {
        __pipeline_memcpy_async(slot(k), xp + row * row_vectors + c,
                                sizeof(P));
      }
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    float sum_squares = 0;
    for (int k = 0; k < shape.vectors; ++k) {
      const P v[1] = {slot_vector(k)};
      sum_squares += SumSquares(v);
    }
    const float total = TeamSum<true>(sum_squares, shape, at, sums, calls);
    const float inv = rsqrtf(total / row_length + eps);
    for (int k = 0; k < shape.vectors; ++k) {
      const P v[1] = {slot_vector(k)};
      P weight[1];
      LoadVectors(wp, row_vectors, vector_at(k), weight);
      StoreNormalised(v, weight, inv, yp + row * row_vectors, row_vectors,
                      vector_at(k));
    }
    if (at.rank == 0 && threadIdx.x == 0) inv_rms[row] = inv;
  }
  LeaveCluster<true>();
}

}  // namespace

int64_t SharedRowResident(DType dtype, const Shape& shape, int shared_bytes) {
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    return ResidentGroups(SharedRowForwardKernel<T>, shape, shared_bytes);
  });
}

ffi::Error LaunchSharedRowForward(cudaStream_t stream, const Plan& plan,
                                  const ForwardBuffers& b, RowGeometry g,
                                  double eps) {
  return DispatchFastType(PlanDType(b.x.element_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch(stream, SharedRowForwardKernel<T>, plan.shape, plan.groups,
                  plan.shared_bytes, "launching the shared-row forward kernel",
                  static_cast<const T*>(b.x.untyped_data()),
                  static_cast<const T*>(b.w.untyped_data()),
                  static_cast<T*>(b.y.untyped_data()),
                  static_cast<float*>(b.inv_rms.untyped_data()), g.rows,
                  static_cast<int>(g.row_length / Pack<T>::kSize), plan.shape,
                  static_cast<float>(g.row_length), static_cast<float>(eps));
  });
}

}  // namespace gpu_ops
