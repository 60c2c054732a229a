"""The kernel variants of the run in h200_two_vectors.log (make_variants.py two_vectors).

The bfloat16 forward + backward of 16384 x 1,024 reaches 79% of the copy
bandwidth on an H200 (benchmarks/results/nvidia-h200.json), under the 80%
target. Its backward gives a row to a team of 128 threads of one 16-byte
vector each, four teams to a block of 512. Every row costs a team the same
bookkeeping (ring copies started and waited for, a team sum, a barrier)
whatever the bytes per thread, and two vectors of 16-bit values a thread
(16 values) spilled registers under the 64 a thread that blocks of 1024
threads allow (h200_overlap.log). Here the kernel of such teams is built for
blocks of at most 512 threads, so it may take up to 128 registers, and
16-bit rows of at most 1,024 values take two vectors a thread, teams of 64
threads:
- `v2t8`: eight teams to a block of 512 threads (128 blocks for 16384 x
  1,024, one an SM);
- `v2t4`: four teams to a block of 256 threads (256 blocks, as now).
Both were slower (see the README); not adopted.
"""
from make_variants import FAST

COMMIT = "7400bb2"

BOUNDS = ("__global__ void __launch_bounds__(kMaxThreads, 1)\n"
          "    FastBackwardKernel(")
WIDE_BOUNDS = ("__global__ void __launch_bounds__(\n"
               "    !kClustered && kVectors * Pack<T>::kSize > kMaxBackwardValues\n"
               "        ? kTeamBlockThreads : kMaxThreads, 1)\n"
               "    FastBackwardKernel(")
LAUNCH_START = ("        std::optional<ffi::Error> launched =\n"
                "            WithShape<T, kMaxBackwardValues>(\n"
                "                row_vectors,\n"
                "                [&](const Shape& shape,\n"
                "                    auto vectors) -> std::optional<ffi::Error> {\n")
LAUNCH_END = ("                        Reciprocal(g.row_length));\n"
              "                  });\n"
              "                });\n")


def two_vectors(block_threads):
    """16-bit rows of at most 1,024 values: teams of 64 threads, 2 vectors each."""
    pick = (
        "                };\n"
        "        std::optional<ffi::Error> launched;\n"
        "        if (sizeof(T) == 2 && row_vectors <= 128) {\n"
        "          const int team = static_cast<int>(\n"
        "              CeilDiv(CeilDiv(int64_t{row_vectors}, 2), kWarpSize) * kWarpSize);\n"
        f"          launched = launch(Shape{{1, team, {block_threads} / team, 2}},\n"
        "                            std::integral_constant<int, 2>{});\n"
        "        } else {\n"
        "          launched = WithShape<T, kMaxBackwardValues>(row_vectors, launch);\n"
        "        }\n")
    return {FAST: [
        (BOUNDS, WIDE_BOUNDS),
        (LAUNCH_START, "        auto launch = [&](const Shape& shape,\n"
                       "                          auto vectors) -> std::optional<ffi::Error> {\n"),
        (LAUNCH_END, LAUNCH_END[:-len("                });\n")] + pick),
    ]}


VARIANTS = {
    "base": ("the kernels of 7400bb2 (those of b42163d)", {}),
    "v2t8": ("16-bit rows of up to 1,024 values: 2 vectors a thread, 8 teams of 64 a block",
             two_vectors(512)),
    "v2t4": ("16-bit rows of up to 1,024 values: 2 vectors a thread, 4 teams of 64 a block",
             two_vectors(256)),
}
