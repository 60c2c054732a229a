// A GPU described by its numbers rather than present: the planner's
// questions (rms_norm_plan.h) answered from a model of residency, so that
// Python can ask, on any machine, which kernels a given GPU would run.
//
// The model counts a block's threads, dynamic shared memory and registers
// against an SM's limits, with each kernel's registers at the cap its launch
// bounds set; the kernels' static shared memory, the registers they leave
// unused and the GPU's placement of clusters are left out. On a GPU the
// handlers ask CUDA's occupancy calculator instead, so a plan there can
// differ from the model's near a boundary (how many rows count as few, say),
// never in kind.
#ifndef GPU_OPS_DESCRIBED_GPU_H_
#define GPU_OPS_DESCRIBED_GPU_H_

#include <cstdint>

#include "plan/rms_norm_plan.h"

namespace gpu_ops {

struct GpuNumbers {
  int sms;
  bool clusters;
  int threads_per_sm;
  int blocks_per_sm;
  int registers_per_sm;
  int shared_bytes_per_sm;
  int shared_bytes_per_block;  // the most a block may ask for
};

class DescribedGpu final : public DeviceModel {
 public:
  explicit DescribedGpu(const GpuNumbers& numbers) : n_(numbers) {}
  bool Clusters() const override { return n_.clusters; }
  int Sms() const override { return n_.sms; }
  int64_t Resident(Kernel kernel, DType dtype, const Shape& shape,
                   int shared_bytes) const override;

 private:
  GpuNumbers n_;
};

}  // namespace gpu_ops

#endif  // GPU_OPS_DESCRIBED_GPU_H_
