// my_rms_norm on the CPU: a loop over rows, sums in double.
#include <cmath>

#include "my_rms_norm.h"

namespace my_ops {
namespace {

ffi::Error Forward(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> weight, double eps,
                   ffi::ResultBuffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> inv_rms) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, &rows, &n); error.failure()) return error;
  const float* in = x.typed_data();
  const float* w = weight.typed_data();
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t j = 0; j < n; ++j) squares += double(in[r * n + j]) * in[r * n + j];
    const float inv = static_cast<float>(1.0 / std::sqrt(squares / n + eps));
    inv_rms->typed_data()[r] = inv;
    for (int64_t j = 0; j < n; ++j) y->typed_data()[r * n + j] = in[r * n + j] * inv * w[j];
  }
  return ffi::Error::Success();
}

ffi::Error Backward(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> inv_rms,
                    ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> weight,
                    ffi::ResultBuffer<ffi::F32> dx, ffi::ResultBuffer<ffi::F32> dweight) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, &rows, &n); error.failure()) return error;
  const float *g = dy.typed_data(), *in = x.typed_data(), *w = weight.typed_data();
  for (int64_t j = 0; j < n; ++j) dweight->typed_data()[j] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double inv = inv_rms.typed_data()[r];
    double mean_gwx = 0;  // mean(dy * weight * x) over the row
    for (int64_t j = 0; j < n; ++j) mean_gwx += double(g[r * n + j]) * w[j] * in[r * n + j];
    mean_gwx /= n;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = r * n + j;
      dx->typed_data()[i] = static_cast<float>(inv * (g[i] * w[j] - in[i] * inv * inv * mean_gwx));
      dweight->typed_data()[j] += static_cast<float>(g[i] * in[i] * inv);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormForwardCpu, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // weight
                                  .Attr<double>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()  // y
                                  .Ret<ffi::Buffer<ffi::F32>>());  // inv_rms

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormBackwardCpu, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // inv_rms
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // weight
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dx
                                  .Ret<ffi::Buffer<ffi::F32>>());  // dweight

}  // namespace my_ops
