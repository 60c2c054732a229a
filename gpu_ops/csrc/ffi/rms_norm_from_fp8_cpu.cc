// The CPU handlers of the norm of a float8 input: each value is its float8_e4m3fn
// value times its group's float32 scale (rounded to float32, as the CUDA
// kernel and jnp compute it), and from there the rows are normalised, and
// differentiated, as rms_norm_cpu.cc's are (kernels/rms_norm_cpu_rows.h).
#include <cstdint>
#include <new>
#include <vector>

#include "ffi/rms_norm_checks.h"
#include "ffi/rms_norm_from_fp8_checks.h"
#include "ffi/rms_norm_handlers.h"
#include "kernels/cpu_half_types.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_e4m3.h"
#include "kernels/rms_norm_cpu_rows.h"

namespace gpu_ops {
namespace {

// The values the float8 values and their scales stand for, in float32.
std::vector<float> Dequantised(const ffi::AnyBuffer& values,
                               const ffi::AnyBuffer& scales, RowGeometry g) {
  const uint8_t* q = static_cast<const uint8_t*>(values.untyped_data());
  const float* s = static_cast<const float*>(scales.untyped_data());
  std::vector<float> x(static_cast<size_t>(g.rows * g.row_length));
  for (int64_t i = 0; i < g.rows * g.row_length; ++i) {
    x[i] = FromFloat8E4M3(q[i]) * s[i / kFloat8Group];
  }
  return x;
}

// fn(x, TypeTag<W>{}): x the dequantised input, W the weight's type
// (float16, bfloat16 or float32, checked).
template <typename Fn>
ffi::Error OnDequantised(const ffi::AnyBuffer& values, const ffi::AnyBuffer& scales,
                         ffi::DataType w_type, RowGeometry g, Fn&& fn) {
  try {
    const std::vector<float> x = Dequantised(values, scales, g);
    return DispatchFloat<Float16Bits, BFloat16Bits>(
        w_type, [&](auto wt) { return fn(x.data(), wt); });
  } catch (const std::bad_alloc&) {
    return ffi::Error::Internal(
        "gpu_ops rms_norm: out of memory for the dequantised input");
  }
}

ffi::Error FromFloat8ForwardCpu(ffi::AnyBuffer values, ffi::AnyBuffer w,
                                ffi::AnyBuffer scales,
                                ffi::Result<ffi::AnyBuffer> y,
                                ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckFromFloat8ForwardBuffers(values, w, scales, eps, *y,
                                               *inv_rms, &g);
      err.failure()) {
    return err;
  }
  return OnDequantised(values, scales, w.element_type(), g, [&](const float* x, auto wt) {
    using W = typename decltype(wt)::type;
    ForwardRows(x, static_cast<float*>(inv_rms->untyped_data()), g, eps,
                static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
                NormalisedRows{*y}.For<float>(static_cast<const W*>(w.untyped_data()),
                                              g.row_length));
    return ffi::Error::Success();
  });
}

ffi::Error FromFloat8BackwardCpu(ffi::AnyBuffer dy, ffi::AnyBuffer inv_rms,
                                 ffi::AnyBuffer values, ffi::AnyBuffer w,
                                 ffi::AnyBuffer scales,
                                 ffi::Result<ffi::AnyBuffer> dx,
                                 ffi::Result<ffi::AnyBuffer> dw, double eps) {
  RowGeometry g;
  if (auto err = CheckFromFloat8BackwardBuffers(dy, inv_rms, values, w, scales,
                                                eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  return OnDequantised(values, scales, w.element_type(), g, [&](const float* x, auto wt) {
    using W = typename decltype(wt)::type;
    Backward(static_cast<const W*>(dy.untyped_data()),
             static_cast<const float*>(inv_rms.untyped_data()), x,
             static_cast<const W*>(w.untyped_data()), static_cast<W*>(dx->untyped_data()),
             static_cast<W*>(dw->untyped_data()), g);
    return ffi::Error::Success();
  });
}

}  // namespace

GPU_OPS_DEFINE_CPU_HANDLER(FromFloat8Forward);
GPU_OPS_DEFINE_CPU_HANDLER(FromFloat8Backward);
}  // namespace gpu_ops
