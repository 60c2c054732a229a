#!/usr/bin/env bash
# Reads hardware counters of the kernels in the benchmark's timed chain, where
# each op reads what the op before wrote (run_set.sh's ncu runs read the same
# buffers at every launch): for each variant named, gpu_ops is built with the
# sources of variants/NAME (make_variants.py SET), then ncu, leaving L2 as the
# kernels before left it (--cache-control none), reads the time, DRAM bytes and
# L2 hit rate of the op's kernels (ours and XLA's `weight + 0 * dweight` add)
# in the third call of kernel_timeline.py's chain (chain_of). On a GPU machine, in the
# repository root; gpu_ops/csrc is put back as it was at the end.
#   benchmarks/kernel_variants/run_chain_ncu.sh OP DTYPE ROWS ROW_LEN KERNELS_PER_OP VARIANT...
#   e.g. ... fwd_bwd bfloat16 32 262144 3 base s16few (the run in part 3 of h100_cluster16.log)
set -u
# shellcheck source=jax_level_steps.sh
. "$(dirname "$0")/jax_level_steps.sh"
op=$1 dtype=$2 rows=$3 row_len=$4 per_op=$5
shift 5
chain=$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import rms_norm_bench; print(rms_norm_bench.CHAIN)')
kept=$(mktemp -d)
cp gpu_ops/csrc/* "$kept"/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in "$@"; do
  cp benchmarks/kernel_variants/variants/"$v"/* gpu_ops/csrc/
  if ! build_gpu_ops /tmp/build_"$v".log; then echo "build of $v failed"; break; fi
  echo "== $v: ncu, $op $dtype $rows x $row_len, the third call's first two ops"
  ncu --cache-control none --clock-control none -k 'regex:Forward|Backward|SumPartials|loop_add' \
    -s $((2 * chain * per_op)) -c $((2 * per_op)) \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    python3 -c "
import sys
sys.path.insert(0, 'benchmarks')
import jax
import gpu_ops
from kernel_timeline import chain_of
fn, inputs = chain_of(gpu_ops.rms_norm, '$op', '$dtype', $rows, $row_len)
for _ in range(3):
    jax.block_until_ready(fn(*inputs))
" 2>&1 | grep -E "^  [a-zA-Z_]|gpu__|dram__|lts__|==PROF==.*pass|rror" | sed 's/^ *//'
done
cp "$kept"/* gpu_ops/csrc/
