// The side-effect recipe's CPU handler: it logs its tag and returns it.
#include "effects.h"

static ffi::Error LogCpu(ffi::AnyBuffer, ffi::Buffer<ffi::S32> after, int32_t tag,
                         ffi::ResultBuffer<ffi::S32> done) {
  if (after.element_count() != 1 || done->element_count() != 1) {
    return ffi::Error::InvalidArgument("log_event: after and done must be int32 scalars");
  }
  LogEvent(tag);
  done->typed_data()[0] = tag;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LogEventCpu, LogCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Attr<int32_t>("tag")
                                  .Ret<ffi::Buffer<ffi::S32>>());
