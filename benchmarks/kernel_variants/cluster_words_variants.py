"""The kernel variants of the run in h200_cluster_words.log (make_variants.py cluster_words).

In h200_words.log, every backward kernel reading bfloat16 values from their
32-bit words (`words_bwd`, Element) took the bfloat16 backward of 16384 x
16,384 (a cluster of two blocks a row) from 423 to 407 µs, but that of rows
of 4,096 (one block a row) from 111 to 117 µs. Here only the cluster
backward does it (FastBackwardKernel with kClustered); the kernels of rows
a block holds, the grid and the split-row backwards are compiled as before:
- `cwords`: the cluster backward's loop (dot and weight gradient) and its
  dx stores (StoreInputGradient) read values with Element.

Only the loop reading with Element (its dx stores as before) spilled 4
bytes in the bfloat16 cluster kernel (ptxas, sm_90), so it was not run.
"""
from make_variants import COMMON, FAST

COMMIT = "521d0c3"

# Element or a 16-bit read, chosen at compile time.
VALUE = """template <bool kWords, typename T>
__device__ __forceinline__ float Value(const Pack<T>& p, int e) {
  if constexpr (kWords) return Element(p, e);
  return ToAcc<float>(p.v[e]);
}

// How a row is spread over threads."""
ADD_VALUE = ("// How a row is spread over threads.", VALUE)
STORE_SIGNATURE = ("template <int kVectors, typename T>\n"
                   "__device__ void StoreInputGradient(")
STORE_BODY = ("    const float dyw = ToAcc<float>(dyv[k].v[e]) * ToAcc<float>(wv[k].v[e]);\n"
              "    return inv * (dyw - ToAcc<float>(xv[k].v[e]) * correction);\n")
STORE_WORDS = [
    (STORE_SIGNATURE, STORE_SIGNATURE.replace("template <int kVectors,",
                                              "template <bool kWords = false, int kVectors,")),
    (STORE_BODY, "    const float dyw = Value<kWords>(dyv[k], e) * Value<kWords>(wv[k], e);\n"
                 "    return inv * (dyw - Value<kWords>(xv[k], e) * correction);\n"),
]
LOOP = ("        const float d = ToAcc<float>(dyv[k].v[e]);\n"
        "        const float v = ToAcc<float>(xv[k].v[e]);\n"
        "        dot += d * ToAcc<float>(wv[k].v[e]) * v;\n")
LOOP_WORDS = (LOOP, "        const float d = Value<kClustered>(dyv[k], e);\n"
                    "        const float v = Value<kClustered>(xv[k], e);\n"
                    "        dot += d * Value<kClustered>(wv[k], e) * v;\n")
STORE_CALL = ("      StoreInputGradient(dyv, xv, wv, inv, correction, dxp + offset,\n",
              "      StoreInputGradient<kClustered>(dyv, xv, wv, inv, correction, dxp + offset,\n")

VARIANTS = {
    "base": ("the kernels of 521d0c3 (those of 54f39f6)", {}),
    "cwords": ("the cluster backward's loop and dx stores read values with Element",
               {COMMON: [ADD_VALUE, *STORE_WORDS], FAST: [LOOP_WORDS, STORE_CALL]}),
}
