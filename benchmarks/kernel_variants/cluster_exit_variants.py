"""The kernel variants of the H200 run in h200_cluster_exit.log (make_variants.py cluster_exit).

ncu on the seed shape's forward (h200_profiles.log) put 16% of its
warp-stall samples at the cluster barrier with which every kernel of
clustered teams ends (LeaveCluster), most on its memory fence (ERRBAR),
which waits for the block's stores of y. The barrier is there so that no
block exits while another may still send it a sum; every block has received
all its sums before it arrives, so the arrival needs no memory order:
- `relaxed`: LeaveCluster arrives with barrier.cluster.arrive.relaxed.
"""
from make_variants import COMMON

COMMIT = "e18fba1"

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "relaxed": ("clusters leave through a relaxed barrier", {COMMON: [
        ("  if constexpr (kClustered) cg::this_cluster().sync();\n",
         "  if constexpr (kClustered) {\n"
         "    asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\\n\\t\"\n"
         "                 \"barrier.cluster.wait.aligned;\" ::: \"memory\");\n"
         "  }\n"),
    ]}),
}
