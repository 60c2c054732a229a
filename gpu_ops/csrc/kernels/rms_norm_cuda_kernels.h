// The CUDA launchers behind the handlers in rms_norm_cuda.cu: each executes
// a plan of rms_norm_plan.h (which says what each path is for) and decides
// nothing, and the *Resident functions answer the planner's questions about
// their kernels with CUDA's occupancy calculator.
// - rms_norm_short_rows.cu: rows of up to 256 values, several a warp;
// - rms_norm_column_slices.cu: the backward of a few rows, over a cluster's
//   column slices or in blocks of rows beside blocks of columns;
// - rms_norm_fast.cu: rows a thread team (or a cluster of blocks) holds,
//   with a residual add too;
// - rms_norm_general.cu: every dtype pair and row length (kGeneral), with a
//   residual add too;
// - rms_norm_fp8.cu: the forward quantised to float8, any dtypes;
// - rms_norm_from_fp8.cu: the norm of a float8 input, forward and backward;
// the last three run the general kernels (general_rows.cuh). The backwards
// of more rows than rms_norm_column_slices.cu takes end with sum_partials.cuh.
//
// Buffers have been validated (rms_norm_checks.h) and rows > 0.
#ifndef GPU_OPS_RMS_NORM_CUDA_KERNELS_H_
#define GPU_OPS_RMS_NORM_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/call_buffers.h"
#include "kernels/row_geometry.h"
#include "plan/rms_norm_plan.h"

namespace gpu_ops {

ffi::Error GeneralForward(cudaStream_t stream, const ResidualForwardBuffers& b,
                          RowGeometry g, double eps);
ffi::Error GeneralBackward(cudaStream_t stream, const BackwardBuffers& b,
                           RowGeometry g);

// The forward quantised to float8_e4m3fn in groups of kFloat8Group values.
ffi::Error QuantisedForward(cudaStream_t stream, const QuantisedForwardBuffers& b,
                            RowGeometry g, double eps);

// The norm of a float8 input.
ffi::Error FromFloat8Forward(cudaStream_t stream, const FromFloat8ForwardBuffers& b,
                             RowGeometry g, double eps);
ffi::Error FromFloat8Backward(cudaStream_t stream, const FromFloat8BackwardBuffers& b,
                              RowGeometry g);

// dw = the sum of the rows of `partials` (float32 or float64, num_partials
// by row_length), in dw's dtype: the backward's last step.
ffi::Error SumPartials(cudaStream_t stream, const ffi::AnyBuffer& partials,
                       const ffi::AnyBuffer& dw, RowGeometry g);

// Whether this GPU runs the kernels' Hopper code, clusters included.
bool RunsClusters();

int64_t RowTeamsResident(Kernel kernel, DType dtype, const Shape& shape,
                         int shared_bytes);
int64_t ShortRowsResident(DType dtype, const Shape& shape);
int64_t ColumnSlicesResident(DType dtype, const Shape& shape);
int64_t RowsAndColumnsResident(DType dtype, const Shape& shape);

// kShortRows, with a weight of x's dtype or, for 16-bit x, float32.
ffi::Error LaunchShortRowsForward(cudaStream_t stream, const Plan& plan,
                                  const ForwardBuffers& b, RowGeometry g, double eps);
ffi::Error LaunchShortRowsBackward(cudaStream_t stream, const Plan& plan,
                                   const BackwardBuffers& b, RowGeometry g);
ffi::Error LaunchColumnSlicesBackward(cudaStream_t stream, const Plan& plan,
                                      const BackwardBuffers& b, RowGeometry g);
ffi::Error LaunchRowsAndColumnsBackward(cudaStream_t stream, const Plan& plan,
                                        const BackwardBuffers& b, RowGeometry g);

// One launcher per path of the forward; those with a kernel for the
// residual add (kBlockRows, and the general kernels) take it where b has
// one.
ffi::Error LaunchWideRowsForward(cudaStream_t stream, const Plan& plan,
                                 const ForwardBuffers& b, RowGeometry g, double eps);
ffi::Error LaunchBlockRowsForward(cudaStream_t stream, const Plan& plan,
                                  const ResidualForwardBuffers& b, RowGeometry g, double eps);
ffi::Error LaunchRowTeamsForward(cudaStream_t stream, const Plan& plan,
                                 const ForwardBuffers& b, RowGeometry g, double eps);
ffi::Error LaunchRowTeamsBackward(cudaStream_t stream, const Plan& plan,
                                  const BackwardBuffers& b, RowGeometry g);

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_CUDA_KERNELS_H_
