"""The kernel variants of the run in h200_sum_blocks.log (make_variants.py sum_blocks).

Six rounds of the bfloat16 forward + backward of 16384 x 1,024 on one H200
reached 79% of the copy bandwidth (../results/rounds/nvidia-h200_near_targets.log),
under the 80% target. Under the profiler the weight-gradient sum
(SumPartialsKernel) took 4.18 µs of that op's 52 (../results/
nvidia-h200_timeline.log), for 1 MiB of partial rows: 256 partial rows of
256 float4 columns, summed by 16 blocks of 16 columns by 64 lanes, each lane
adding up 4 partial rows, so 16 SMs read 64 KiB each. These variants spread
the sum over more SMs, in blocks of 512 threads:
- `p2`: about 2 partial rows a lane, up to 256 lanes (4 columns by 128 lanes
  for 256 partial rows: 64 blocks);
- `p1`: one partial row a lane, up to 256 lanes (2 columns by 256 lanes:
  128 blocks);
- `nosum`: no sum at all (dw is wrong, so the benchmark's check stops it;
  only its timeline runs): what the sum costs at most.
"""
from make_variants import COMMON

COMMIT = "b21505f"

LANES = ("  int lanes = 1;\n"
         "  while (lanes < 128 && lanes * 4 < num_partials) lanes *= 2;\n"
         "  const dim3 block(kMaxThreads / lanes, lanes);\n")


def lanes(per_lane):
    """Lanes of about `per_lane` partial rows each, up to 256, in 512-thread blocks."""
    return {COMMON: [(LANES,
                      "  int lanes = 1;\n"
                      f"  while (lanes < 256 && lanes * {per_lane} < num_partials) lanes *= 2;\n"
                      "  const dim3 block(kMaxThreads / 2 / lanes, lanes);\n")]}


VARIANTS = {
    "base": ("the kernels of b21505f (those of 9e9c7ee)", {}),
    "p2": ("SumPartials: about 2 partial rows a lane, 512-thread blocks", lanes(2)),
    "p1": ("SumPartials: one partial row a lane, 512-thread blocks", lanes(1)),
    "nosum": ("no weight-gradient sum (wrong dw)", {COMMON: [
        (LANES, "  if (num_partials > 0) return ffi::Error::Success();\n" + LANES)]}),
}
