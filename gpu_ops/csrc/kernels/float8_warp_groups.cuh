// The layout of the float8 variants of the general kernels (rms_norm_fp8.cu,
// rms_norm_from_fp8.cu): a block of kFloat8BlockThreads takes a row, and
// each thread chunks of 4 consecutive values, whose float8 bytes are one
// 32-bit word (little-endian: value k at byte k), one load or store; a
// warp's 32 chunks are a group of kFloat8Group values.
#ifndef GPU_OPS_FLOAT8_WARP_GROUPS_CUH_
#define GPU_OPS_FLOAT8_WARP_GROUPS_CUH_

#include "kernels/row_geometry.h"
#include "plan/rms_norm_plan.h"

namespace gpu_ops {

constexpr int kFloat8BlockThreads = 256;
constexpr int kFloat8ValuesPerThread = kFloat8Group / kWarpSize;
static_assert(kFloat8ValuesPerThread == 4, "a thread's float8 values are one word");

}  // namespace gpu_ops

#endif  // GPU_OPS_FLOAT8_WARP_GROUPS_CUH_
