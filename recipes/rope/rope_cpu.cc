// The rotary embedding's execute stage on the CPU: each pair of values of a
// row turns by its token's position times the pair's frequency.
#include <cmath>

#include "rope.h"

static ffi::Error RopeCpu(RopeTable* table, ffi::Buffer<ffi::F32> x,
                          ffi::Buffer<ffi::S32> positions, ffi::ResultBuffer<ffi::F32> y) {
  auto rows = RopeRows(*table, x.dimensions(), positions.element_count(), y->element_count());
  if (rows.has_error()) return rows.error();
  const int64_t heads = x.dimensions()[1];
  const int64_t pairs = table->head_dim / 2;
  for (int64_t row = 0; row < *rows; ++row) {
    const float position = static_cast<float>(positions.typed_data()[row / heads]);
    const float* in = x.typed_data() + row * table->head_dim;
    float* out = y->typed_data() + row * table->head_dim;
    for (int64_t i = 0; i < pairs; ++i) {
      const float angle = position * table->frequencies.inverse[i];
      const float c = std::cos(angle), s = std::sin(angle);
      out[2 * i] = in[2 * i] * c - in[2 * i + 1] * s;
      out[2 * i + 1] = in[2 * i] * s + in[2 * i + 1] * c;
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(RopeExecuteCpu, RopeCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::State<RopeTable>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
