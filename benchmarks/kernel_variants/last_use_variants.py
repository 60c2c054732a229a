"""The kernel variants of the runs in h200_last_use.log and h100_last_use.log (make_variants.py last_use).

The backward's reads of x and dy are the op's last reads of them. In the
benchmark's chain (and in a network) what is read next is what the op
wrote: the next forward reads y, the next backward dy = this dx. Marking
the backward's copies as evict-first in L2 (a `createpolicy` cache hint on
`cp.async`, `ld.global.cs` for loads to registers) would leave y and dx in
L2 longer. The split-row kernels' second passes already mark their loads
so (LoadVectors<kLastUse>). The forward's x is not marked: the backward
reads it again.
- `gridlu`: the grid backward (the seed shape's) marks its loads of x and dy;
- `fastlu`: the backward of rows a block or cluster holds marks its rings'
  copies of x and dy;
- `lu`: both.
bench_kernels.cu reads the same buffers at every launch, where evict-first
can only lose; the JAX-level chain (run_jax_level.sh) is the measure here.
Part 1: the seed shape's bfloat16 forward + backward went from 36.2 to
31.1 µs at the JAX level (`lu`; the grid backward under the profiler from
19.7 to 16.8 µs); commit 4ca2340 adopted `gridlu`. `fastlu` slowed the
cluster backward of 16384 x 16,384 under CUDA events (409.45 to 446.9 µs), so
part 2 tries `ringlu`, its marks only where a block holds a row: the
forward + backward of rows of 1,024 did not gain (bfloat16 16384 x 1,024
51.4 and 51.8 µs, 32768 x 1,024 96.5 and 99.1 µs). Not adopted.
Part 3 (h100_last_use.log, an H100) marks the stores of y and dx, which the
next ops read, evict-last (`outlast`): the seed shape's bfloat16 forward +
backward went from 37.8 to 39.7 µs; the other cases moved by at most 1.6%
(the small batch, by up to 0.3 µs). Not adopted.
"""
from make_variants import COMMON, FAST, GRID

COMMIT = "9675f5a"

COPY_LAST_USE = [(
    "// For LoadVectors<kLastUse>: the op's last read of these vectors.\n"
    "constexpr bool kLastUse = true;\n",
    "// For LoadVectors<kLastUse>: the op's last read of these vectors.\n"
    "constexpr bool kLastUse = true;\n"
    "\n"
    "// An asynchronous copy of the 16 bytes at `from` to shared memory at `to`,\n"
    "// marked as the op's last read of them (evict first from L2).\n"
    "template <typename P>\n"
    "__device__ __forceinline__ void CopyLastUse(P* to, const P* from) {\n"
    "  static_assert(sizeof(P) == 16, \"16-byte copies\");\n"
    "  uint64_t policy;\n"
    "  asm(\"createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\" : \"=l\"(policy));\n"
    "  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));\n"
    "  asm volatile(\"cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\"\n"
    "               :: \"r\"(shared), \"l\"(from), \"l\"(policy) : \"memory\");\n"
    "}\n",
)]

GRID_LAST_USE = [
    ("    if (holds(j)) __pipeline_memcpy_async(slot(j), xp + at_row, sizeof(P));\n",
     "    if (holds(j)) CopyLastUse(slot(j), xp + at_row);\n"),
    ("      dy_registers[j] = VectorOrZeros(holds(j), dyp + at_row);\n",
     "      dy_registers[j] = VectorOrZeros<kLastUse>(holds(j), dyp + at_row);\n"),
    ("      __pipeline_memcpy_async(dy_slot(j), dyp + at_row, sizeof(P));\n",
     "      CopyLastUse(dy_slot(j), dyp + at_row);\n"),
]

def rings_marked(when):
    """Edits that mark FastBackwardKernel's ring copies as last reads where
    `when` (C++, true in the kernel's instances that mark them)."""
    return [
        ("  P* slots;  // [kStages][kVectors][blockDim.x]\n",
         "  P* slots;  // [kStages][kVectors][blockDim.x]\n"
         "  bool last = false;  // copies are the op's last reads (CopyLastUse)\n"),
        ("        __pipeline_memcpy_async(Slot(stage, k), row + c, sizeof(P));\n",
         "        if (last) {\n"
         "          CopyLastUse(Slot(stage, k), row + c);\n"
         "        } else {\n"
         "          __pipeline_memcpy_async(Slot(stage, k), row + c, sizeof(P));\n"
         "        }\n"),
        ("  const RowRing<P, kVectors> dy_ring{ring_slots};\n"
         "  const RowRing<P, kVectors> x_ring{ring_slots +\n"
         "                                    kStages * kVectors * blockDim.x};\n",
         f"  const RowRing<P, kVectors> dy_ring{{ring_slots, {when}}};\n"
         "  const RowRing<P, kVectors> x_ring{\n"
         f"      ring_slots + kStages * kVectors * blockDim.x, {when}}};\n"),
    ]


RING_LAST_USE = rings_marked("true")
# Part 2, on commit 4ca2340 (the grid backward's marks adopted): the rings'
# marks only where a block holds a row (fastlu slowed the cluster backward of
# rows of 16,384 under CUDA events).
UNCLUSTERED_RING_LAST_USE = rings_marked("!kClustered")

# Part 3, on commit 4ca2340: the stores of y and dx (StoreVectors), which
# the next ops read, marked evict-last in L2.
OUTPUT_EVICT_LAST = [(
    "      row[c] = out;\n",
    "      uint64_t policy;\n"
    "      asm(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\" : \"=l\"(policy));\n"
    "      uint4 words;\n"
    "      memcpy(&words, &out, sizeof(words));\n"
    "      asm volatile(\"st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;\"\n"
    "                   ::\"l\"(row + c), \"r\"(words.x), \"r\"(words.y), \"r\"(words.z),\n"
    "                     \"r\"(words.w), \"l\"(policy) : \"memory\");\n",
)]

VARIANTS = {
    "base": ("the kernels of 9675f5a (those of e9da665)", {}),
    "gridlu": ("the grid backward's loads of x and dy marked evict-first",
               {COMMON: COPY_LAST_USE, GRID: GRID_LAST_USE}),
    "fastlu": ("the backward rings' copies of x and dy marked evict-first",
               {COMMON: COPY_LAST_USE, FAST: RING_LAST_USE}),
    "lu": ("gridlu and fastlu", {COMMON: COPY_LAST_USE, GRID: GRID_LAST_USE, FAST: RING_LAST_USE}),
    "base2": ("the kernels of 4ca2340 (gridlu adopted)", {}, "4ca2340"),
    "ringlu": ("base2, the rings' copies marked where a block holds a row",
               {FAST: UNCLUSTERED_RING_LAST_USE}, "4ca2340"),
    "outlast": ("base2, every store of y and dx marked evict-last in L2",
                {COMMON: OUTPUT_EVICT_LAST}, "4ca2340"),
}
