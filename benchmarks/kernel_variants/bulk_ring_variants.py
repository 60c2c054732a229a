"""The kernel variants of the run in h200_bulk_ring.log (make_variants.py bulk_ring).

The backward streams each row of dy and x into a ring of shared-memory
slots with cp.async: every thread of a team copies its own 16-byte vectors
and waits for its own copies. Hopper can copy a block's whole part of a row
with one instruction instead (a bulk copy, done by the TMA unit), counting
the bytes on a transaction barrier (mbarrier) that the team waits on:
- `bulk`: FastBackwardKernel's two rings filled by bulk copies, one thread
  a team issuing them; the forward is unchanged.
"""
from make_variants import FAST

COMMIT = "ad672bc"

BULK_RING = r"""// A ring of kStages row slots like RowRing, filled by bulk copies (TMA):
// one thread of a team (the leader) copies the block's part of a row, which
// is contiguous (ThreadPlace), with one instruction, and the copy counts its
// bytes on the stage's transaction barrier, which the whole team waits on.
template <typename P, int kVectors>
struct BulkRing {
  P* slots;        // [kStages][teams][part]
  uint64_t* bars;  // [teams][kStages]
  int part;        // vectors in a block's part of a row: team * kVectors
  int teams;

  __device__ P* Part(int stage, const Place& at) const {
    return slots + (stage * teams + at.team) * part;
  }
  __device__ uint32_t Bar(int stage, const Place& at) const {
    return SharedAddress(bars + at.team * kStages + stage);
  }
  // Vectors of the block's part of a row (none past the row's end).
  __device__ int PartVectors(int row_vectors, const Place& at) const {
    return max(0, min(part, row_vectors - at.rank * part));
  }
  __device__ void Init(bool leader, const Place& at) const {
    if (!leader) return;
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Bar(s, at))
                   : "memory");
    }
  }
  // The leader starts copying the block's part of the row at `row`, if it
  // exists. The team has read the slot's previous row (TeamSum's barrier).
  __device__ void Start(const P* __restrict__ row, bool exists,
                        int row_vectors, const Place& at, int stage,
                        bool leader) const {
    const int n = PartVectors(row_vectors, at);
    if (!leader || !exists || n == 0) return;
    const uint32_t bar = Bar(stage, at);
    const uint32_t bytes = static_cast<uint32_t>(n) * 16;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1], %2, [%3];" ::"r"(SharedAddress(Part(stage, at))),
        "l"(row + at.rank * part), "r"(bytes), "r"(bar)
        : "memory");
  }
  // Waits for the row in `stage` (its `phase`-th use), then reads this
  // thread's vectors of it; zeros past the row's end or for no row.
  __device__ void Read(int stage, unsigned phase, bool exists, int row_vectors,
                       const Place& at, P (&v)[kVectors]) const {
    if (exists && PartVectors(row_vectors, at) > 0) {
      const uint32_t bar = Bar(stage, at);
      uint32_t done = 0;
      while (!done) {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(bar), "r"(phase)
            : "memory");
      }
    }
    const P* mine = Part(stage, at) - at.rank * part;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      v[k] = VectorOrZeros(exists && c < row_vectors, mine + c);
    }
  }
};


// [forward-kernel]
"""

EDITS = [
    ("\n// [forward-kernel]\n", "\n" + BULK_RING),
    ("""  const RowRing<P, kVectors> dy_ring{ring_slots};
  const RowRing<P, kVectors> x_ring{ring_slots +
                                    kStages * kVectors * blockDim.x};
  P wv[kVectors];
""", """  __shared__ uint64_t ring_bars[2][kTeamBlockThreads / kWarpSize][kStages];
  const int part = shape.team * kVectors;
  const BulkRing<P, kVectors> dy_ring{ring_slots, &ring_bars[0][0][0], part,
                                      shape.teams};
  const BulkRing<P, kVectors> x_ring{
      ring_slots + kStages * kVectors * blockDim.x, &ring_bars[1][0][0], part,
      shape.teams};
  const bool leader = threadIdx.x % shape.team == 0;
  dy_ring.Init(leader, at);
  x_ring.Init(leader, at);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  P wv[kVectors];
"""),
    ("at, s);\n    x_ring.Start(xp + offset, s < count, row_vectors, at, s);\n    __pipeline_commit();\n",
     "at, s, leader);\n    x_ring.Start(xp + offset, s < count, row_vectors, at, s, leader);\n"),
    ("  int stage = 0;\n  int64_t offset",
     "  int stage = 0;\n  unsigned phase = 0;  // of the stage's barrier: its uses so far, mod 2\n"
     "  int64_t offset"),
    ("                  ahead_stage);\n", "                  ahead_stage, leader);\n"),
    ("                 ahead_stage);\n    __pipeline_commit();\n"
     "    __pipeline_wait_prior(kStages - 1);  // this row's copies have landed\n",
     "                 ahead_stage, leader);\n"),
    ("dy_ring.Read(stage, exists", "dy_ring.Read(stage, phase, exists"),
    ("x_ring.Read(stage, exists", "x_ring.Read(stage, phase, exists"),
    ("    stage = stage == kStages - 1 ? 0 : stage + 1;\n  }\n  StartNextKernel();",
     "    if (stage == kStages - 1) {\n      stage = 0;\n      phase ^= 1;\n    } else {\n"
     "      ++stage;\n    }\n  }\n  StartNextKernel();"),
]

VARIANTS = {
    "base": ("the kernels of ad672bc (those of 5926f00)", {}),
    "bulk": ("the backward's rings filled by bulk copies (TMA)", {FAST: EDITS}),
}
