"""The kernel variants of the run in h200_words.log (make_variants.py words).

ptxas holds a bfloat16 vector's eight values in eight 32-bit registers (PRMT
splits them after the 16-byte load), where it holds a float16 vector in
four: FastForwardKernel<bfloat16, 2, 2> (the forward of bfloat16 rows of
1,024 to 8,192 values) takes 64 registers against float16's 40, so an SM
holds 16 of its 64-thread blocks for rows of 1,024, not 25. Taking each
bfloat16 value as float from the 32-bit word that holds it (`word << 16` or
`word & 0xffff0000`, exact) leaves the words whole:
- `words`: every kernel reads bfloat16 values that way (Element);
- `words_fwd`: only the forward kernels (SumSquares, StoreNormalised,
  RowForwardKernel, the split rows' first pass);
- `words_bwd`: only the backward kernels (FastBackwardKernel's loop,
  StoreInputGradient, the split rows' second backward pass, the grid
  backward);
- `words40`: `words`, with FastForwardKernel capped at 40 registers
  (__maxnreg__ in place of __launch_bounds__) for vectors of 16-bit values
  (and float32 ones of at most 2 vectors a thread, which PickShape does not
  choose): bfloat16 rows of 1,024 to 8,192 values, which then spill nothing
  (the base kernels' would spill 76 bytes). An SM then holds 25 blocks of
  64 threads (rows of 1,024) instead of 16 (base, 64 registers) or 18
  (`words`, 51), 6 of 256 instead of 4, and 3 of 512 instead of 2;
- `words_fwd40`: `words_fwd` with that cap (the backward kernels as in
  `base`).
"""
import re

from make_variants import COMMON, FAST, GRID, SPLIT, between, source

COMMIT = "acd8b8c"

# Element as commit 54f39f6 adopted it, under the comment it had in the runs.
ELEMENT_CODE = between(source("54f39f6", COMMON),
                       "template <typename T>\n__device__ __forceinline__ float Element(",
                       "\n// How a row is spread over threads.")
ELEMENT = ("// Element e of a vector, as float. A bfloat16 value is the top half of a\n"
           "// float, so it is taken from the 32-bit word that holds it: read as a 16-bit\n"
           "// value, ptxas gave each value of a vector a register of its own.\n"
           + ELEMENT_CODE + "\n// How a row is spread over threads.")
ADD_ELEMENT = [("// How a row is spread over threads.", ELEMENT),
               ("#include <tuple>\n", "#include <tuple>\n#include <type_traits>\n")]


def elements(line):
    """An edit of `line` reading its vector values with Element."""
    return (line, re.sub(r"ToAcc<float>\((\w+(?:\[\w+\])?)\.v\[e\]\)", r"Element(\1, e)", line))


FORWARD = {
    COMMON: ADD_ELEMENT + [
        elements("      const float value = ToAcc<float>(v[k].v[e]);\n"),
        elements("    return ToAcc<float>(wv[k].v[e]) * (inv * ToAcc<float>(xv[k].v[e]));\n")],
    FAST: [elements("        out.v[e] = Storage<T>::From(ToAcc<float>(wk.v[e]) *\n"
                    "                                    (inv * ToAcc<float>(xv[k].v[e])));\n")],
    SPLIT: [elements("        const float va = ToAcc<float>(av[k].v[e]);\n"),
            elements("          sum += va * ToAcc<float>(bv[k].v[e]) * ToAcc<float>(wv[k].v[e]);\n")],
}
BACKWARD = {
    COMMON: [elements("    const float dyw = ToAcc<float>(dyv[k].v[e]) * ToAcc<float>(wv[k].v[e]);\n"
                      "    return inv * (dyw - ToAcc<float>(xv[k].v[e]) * correction);\n")],
    FAST: [elements("        const float d = ToAcc<float>(dyv[k].v[e]);\n"
                    "        const float v = ToAcc<float>(xv[k].v[e]);\n"
                    "        dot += d * ToAcc<float>(wv[k].v[e]) * v;\n")],
    SPLIT: [elements("          dw[k][e] += ToAcc<float>(dyv[k].v[e]) * ToAcc<float>(xv[k].v[e]) * inv;\n")],
    GRID: [elements("        const float dy_x = ToAcc<float>(dyv.v[e]) * ToAcc<float>(xv.v[e]);\n"
                    "        sum += dy_x * ToAcc<float>(wv[0].v[e]);\n")],
}


def both(*parts):
    """The edits of every part, file by file."""
    merged = {}
    for part in parts:
        for name, edits in part.items():
            merged.setdefault(name, []).extend(edits)
    return merged


BACKWARD_ONLY = both({COMMON: ADD_ELEMENT}, BACKWARD)
FORWARD_BOUNDS = ("template <typename T, int kVectors, int kRows>\n"
                  "__global__ void __launch_bounds__(kMaxThreads)\n"
                  "    FastForwardKernel(")
CAP_40 = {FAST: [(FORWARD_BOUNDS, FORWARD_BOUNDS.replace(
    "__launch_bounds__(kMaxThreads)", "__maxnreg__(sizeof(T) * kVectors <= 8 ? 40 : 64)"))]}
VARIANTS = {
    "base": ("the kernels of acd8b8c (those of 0592e6c)", {}),
    "words": ("every kernel reads bfloat16 values from whole words", both(FORWARD, BACKWARD)),
    "words_fwd": ("the forward kernels only", FORWARD),
    "words_bwd": ("the backward kernels only", BACKWARD_ONLY),
    "words40": ("`words`, the forward of short rows capped at 40 registers",
                both(FORWARD, BACKWARD, CAP_40)),
    "words_fwd40": ("`words_fwd` with that cap", both(FORWARD, CAP_40)),
}
