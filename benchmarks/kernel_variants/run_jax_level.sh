#!/usr/bin/env bash
# Times kernel variants at the JAX level, where each op of the timed chain reads
# what the op before wrote (bench_kernels.cu reads the same buffers every
# launch): for each variant named, gpu_ops is built with the sources of
# variants/NAME (make_variants.py SET), then rms_norm_bench.py times gpu_ops and
# XLA on the cases of the row lengths given and kernel_timeline.py shows one case's
# kernels. On a GPU machine, in the repository root; gpu_ops/csrc is put back
# as it was at the end.
#   benchmarks/kernel_variants/run_jax_level.sh "ROW_LEN..." "TIMELINE_ARGS" VARIANT...
#   e.g. ... 262144 "--dtype float32 --rows 32 --row-len 262144" base wlate v2 base wlate v2
#   (the run in h200_split_forward.log; h200_split_overlap.log took the same steps)
set -u
# shellcheck source=jax_level_steps.sh
. "$(dirname "$0")/jax_level_steps.sh"
row_len=$1 timeline_args=$2
shift 2
kept=$(mktemp -d)
cp gpu_ops/csrc/* "$kept"/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in "$@"; do
  cp benchmarks/kernel_variants/variants/"$v"/* gpu_ops/csrc/
  if ! build_gpu_ops /tmp/build_"$v".log; then echo "build of $v failed"; break; fi
  echo "== $v: rms_norm_bench.py --row-len $row_len --impl gpu_ops xla"
  # shellcheck disable=SC2086  # one or more row lengths
  python3 benchmarks/rms_norm_bench.py --row-len $row_len --impl gpu_ops xla \
    --out /tmp/bench_"$v".json 2>&1 | without_log_noise
  echo "== $v: kernel_timeline.py $timeline_args --impl gpu_ops --op fwd fwd_bwd"
  # shellcheck disable=SC2086  # the timeline's arguments, split
  python3 benchmarks/kernel_timeline.py $timeline_args --impl gpu_ops --op fwd fwd_bwd 2>&1 |
    without_log_noise
done
cp "$kept"/* gpu_ops/csrc/
