// Writing one row into the cache on the CPU. Where XLA gave the result its
// own buffer (no aliasing), the handler must first copy the whole cache.
#include <algorithm>

#include "kv_cache.h"

static ffi::Error WriteRowCpu(ffi::Buffer<ffi::F32> cache, ffi::Buffer<ffi::F32> row,
                              ffi::Buffer<ffi::S32> slot, ffi::ResultBuffer<ffi::F32> out) {
  if (ffi::Error error = CheckWriteRow(cache.dimensions(), row.element_count(),
                                       slot.element_count(), out->element_count());
      error.failure()) {
    return error;
  }
  if (out->typed_data() != cache.typed_data()) {
    std::copy_n(cache.typed_data(), cache.element_count(), out->typed_data());
    whole_cache_copies.fetch_add(1);
  }
  const int64_t width = cache.dimensions()[1];
  const int64_t at = ClampSlot(slot.typed_data()[0], cache.dimensions()[0]);
  std::copy_n(row.typed_data(), width, out->typed_data() + at * width);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(WriteRowCpuHandler, WriteRowCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
