"""The kernel variants of the run in h200_short_rows.log (make_variants.py short_rows).

The bfloat16 forward + backward of 16384 x 1,024 reaches 79% of the copy
bandwidth on an H200 (benchmarks/results/nvidia-h200.json), 0.8 µs a step
short of 80%; its forward alone runs at 91%. That forward gives a row to 64
threads of two 16-byte vectors each, two rows to a block of 64 threads
(FastForwardKernel, four loads in flight a thread). Here 16-bit rows of at
most 1,024 values take one vector a thread instead, teams of 128 threads:
- `f1r4`: four rows to a block of 128 threads (four loads a thread, as now);
- `f1r2`: two rows to a block (two loads a thread).
Eight rows to a block (eight loads a thread) spilled registers under the 64
that the kernel's bound of 1024 threads allows, and was not run. Both run
variants were slower (see the README); not adopted.
"""
from make_variants import FAST

COMMIT = "dea768f"

FORWARD_START = ("        return WithShape<T, kMaxForwardValues>(\n"
                 "            row_vectors,\n"
                 "            [&](const Shape& shape,\n"
                 "                auto vectors) -> std::optional<ffi::Error> {\n")
ROWS = "              constexpr int kRows = std::max(1, kForwardLoads / kVectors);\n"
FORWARD_END = ("                              epsilon);\n"
               "              });\n"
               "            });\n"
               "      });\n"
               "}\n")


def one_vector(loads):
    """16-bit rows of at most 1,024 values: one vector a thread, `loads` rows a block."""
    return {FAST: [
        (FORWARD_START, "        auto launch = [&](const Shape& shape,\n"
                        "                          auto vectors) -> std::optional<ffi::Error> {\n"),
        (ROWS, "              constexpr int kRows = std::max(\n"
               f"                  1, (sizeof(T) == 2 && kVectors == 1 ? {loads} : kForwardLoads) / kVectors);\n"),
        (FORWARD_END, "                              epsilon);\n"
                      "              });\n"
                      "            };\n"
                      "        if (sizeof(T) == 2 && row_vectors <= 128) {\n"
                      "          return WithShape<T, 8>(row_vectors, launch);\n"
                      "        }\n"
                      "        return WithShape<T, kMaxForwardValues>(row_vectors, launch);\n"
                      "      });\n"
                      "}\n"),
    ]}


VARIANTS = {
    "base": ("the kernels of dea768f (those of b42163d)", {}),
    "f1r4": ("16-bit rows of up to 1,024 values: forward of one vector a thread, 4 rows a block",
             one_vector(4)),
    "f1r2": ("16-bit rows of up to 1,024 values: forward of one vector a thread, 2 rows a block",
             one_vector(2)),
}
