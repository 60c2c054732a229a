# Writes one set of variants (make_variants.py SET, from git history), builds each with
# bench_kernels.cu, checks their results against a float64 host reference
# (BENCH_CHECK) and times them with CUDA events in two rounds.
#   run_set.sh shapes_and_registers   the run in h200_shapes_and_registers.log
#   run_set.sh overlap                the run in h200_overlap.log
#   run_set.sh split_order            the run in h200_split_order.log
#   run_set.sh grid_phases            part 2 of h200_grid_backward.log
#   run_set.sh stages                 the run in h200_stages.log
#   run_set.sh grid_costs             the run in h200_grid_costs.log
#   run_set.sh row_sums               the run in h200_row_sums.log
#   run_set.sh profiles               the run in h200_profiles.log
#   run_set.sh cluster_exit           the run in h200_cluster_exit.log
#   run_set.sh dw_late                the run in h200_dw_late.log
#   run_set.sh row_overhead           the run in h200_row_overhead.log
#   run_set.sh backward_stages        the run in h200_backward_stages.log
#   run_set.sh strided_rows           the run in h200_strided_rows.log
#   run_set.sh shared_balance         the run in h200_shared_balance.log
#   run_set.sh cluster_start          the run in h200_cluster_start.log
#   run_set.sh weight_sum             the run in h200_weight_sum.log
#   run_set.sh split_reverse          part 2 of h200_split_reverse.log
#   run_set.sh row_blocks             the run in h100_row_blocks.log
#   run_set.sh wide_teams             the run in h200_wide_teams.log
#   run_set.sh bulk_ring              the run in h200_bulk_ring.log
#   run_set.sh sum_start              the run in h200_sum_start.log
#   run_set.sh cluster_inv            the run in h200_cluster_inv.log
#   run_set.sh two_vectors            the run in h200_two_vectors.log
#   run_set.sh short_rows             the run in h200_short_rows.log
#   run_set.sh square_once            part 1 of h200_square_once.log
#   run_set.sh streamed               part 1 of h200_streamed.log
#   run_set.sh words                  part 1 of h200_words.log
#   run_set.sh cluster_words          the run in h200_cluster_words.log
#   run_set.sh shared16               the run in h200_shared16.log
#   run_set.sh last_use               part 1 of h200_last_use.log
#   run_set.sh grid_staged            parts 1, 3 and 4 of h100_grid_staged.log
#   run_set.sh cluster16              part 1 of h100_cluster16.log
#   run_set.sh grid_forward           part 1 of h100_grid_forward.log
set -u
NCU=()
NCU_FULL=()
# The grid backward's cases: row counts that do not fill the last group of
# rows, and blocks that do not fill their last columns.
GRID_CHECKS=("bf16 32 262144" "f32 17 131080" "bf16 7 1000000" "f32 16 262144" "bf16 3 131080")
GRID_TIMED=("bf16 32 262144" "bf16 16 524288" "f32 16 262144" "bf16 64 131080" "bf16 4 262144")
# Every shape of FastBackwardKernel: teams sharing a block (rows of 1,024), a
# block (4,096 and 8,192) or a cluster (16,384); segments with fewer rows than
# the rest or none (1001, 17 and 999 rows).
BACKWARD_CHECKS=("bf16 16384 1024" "bf16 1001 1024" "f32 17 4096" "bf16 999 8192" "bf16 1001 16384"
                 "f32 16384 1024" "bf16 512 4096")
cd "$(dirname "$0")"
SET=${1:-shapes_and_registers}
if [ "${CARRIED:-0}" = 1 ]; then
  VARIANTS=$(ls variants)  # written by make_variants.py elsewhere and carried here (no git history)
else
  VARIANTS=$(python3 make_variants.py "$SET" | tee /dev/stderr | awk '{print $1}') || exit 1
fi
if [ "$SET" = overlap ]; then
  # Odd row counts and rows of 16,384 in the checks: the prefetching forward's
  # last groups, and its 1024-thread blocks.
  CHECKS=("bf16 16384 1024" "bf16 1001 1024" "bf16 999 16384" "f32 1001 4096" "f32 16384 1024" "bf16 512 4096")
  TIMED=("bf16 16384 1024" "bf16 16384 4096" "bf16 16384 8192" "bf16 16384 16384" "bf16 32768 16384"
         "bf16 512 4096" "f32 16384 1024" "f32 16384 4096" "f32 16384 16384" "f32 512 4096")
elif [ "$SET" = split_order ]; then
  # Row counts that are not a multiple of the backward's segments (gaps in
  # pass 1's reversed order), ragged chunks, and bfloat16 rows too long for
  # the shared-row forward (which the forward takes otherwise).
  CHECKS=("bf16 32 262144" "f32 32 262144" "bf16 33 262144" "f32 17 131080" "bf16 61 262144" "bf16 24 524288")
  TIMED=("bf16 32 262144" "f32 32 262144" "bf16 128 262144" "f32 128 262144" "bf16 16 524288" "bf16 64 131080")
  # ncu on the seed shape's backward with L2 left as the kernels before left it.
  NCU=("bf16 32 262144")
elif [ "$SET" = grid_phases ]; then
  CHECKS=("${GRID_CHECKS[@]}")
  TIMED=("${GRID_TIMED[@]}")
  NCU=("bf16 32 262144")
elif [ "$SET" = stages ]; then
  # The grid backward's cases as in grid_phases, and the shared-row forward's
  # row counts that leave a cluster's second buffer empty or not filled.
  CHECKS=("${GRID_CHECKS[@]}" "bf16 33 262144" "bf16 67 131080" "bf16 5 262144")
  TIMED=("${GRID_TIMED[@]}" "bf16 1024 262144")
  NCU=("bf16 32 262144")
elif [ "$SET" = grid_costs ]; then
  # The seed shape against the same bytes in float32 and in bfloat16 rows
  # twice as long (two thread groups a block, as in float32).
  CHECKS=("bf16 32 262144" "f32 16 262144")
  TIMED=("bf16 32 262144" "bf16 16 524288" "f32 16 262144")
  NCU=("bf16 32 262144")
  NCU_FULL=("bwd bf16 32 262144" "bwd bf16 16 524288" "bwd f32 16 262144")
elif [ "$SET" = row_sums ]; then
  CHECKS=("${GRID_CHECKS[@]}")
  TIMED=("${GRID_TIMED[@]}")
  NCU=("bf16 32 262144")
  NCU_FULL=("bwd bf16 32 262144")
elif [ "$SET" = dw_late ] || [ "$SET" = grid_staged ]; then
  CHECKS=("${GRID_CHECKS[@]}")
  TIMED=("${GRID_TIMED[@]}")
  NCU=("bf16 32 262144")
elif [ "$SET" = cluster_exit ]; then
  # Every kernel of clustered teams: the shared-row forward, the cluster
  # forward (rows over 16,384 values) and backward (over 8,192).
  CHECKS=("bf16 32 262144" "bf16 67 131080" "bf16 16384 16384" "f32 16384 16384" "bf16 1001 32768")
  TIMED=("bf16 32 262144" "bf16 1024 262144" "bf16 64 131080" "bf16 16384 16384" "bf16 32768 16384"
         "f32 16384 16384" "bf16 4096 65536")
elif [ "$SET" = row_overhead ]; then
  CHECKS=("${BACKWARD_CHECKS[@]}")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 4096" "bf16 16384 8192" "bf16 16384 16384"
         "bf16 512 4096" "f32 16384 1024" "f32 16384 16384")
  NCU_FULL=("bwd bf16 16384 1024")
elif [ "$SET" = backward_stages ] || [ "$SET" = strided_rows ]; then
  # row_overhead's cases, and rows of 65,536 (the cluster forward's ring).
  CHECKS=("${BACKWARD_CHECKS[@]}" "bf16 255 65536")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 4096" "bf16 16384 8192" "bf16 16384 16384"
         "bf16 512 4096" "f32 16384 1024" "f32 16384 16384" "bf16 4096 65536")
elif [ "$SET" = shared_balance ]; then
  # The shared-row forward: rows that leave clusters idle (5), a second row
  # for some clusters (33), many rows (1,024), rows that do not fill the
  # last vectors of a block (131,080).
  CHECKS=("bf16 32 262144" "bf16 33 262144" "bf16 5 262144" "bf16 67 131080" "bf16 3 131080")
  TIMED=("bf16 32 262144" "bf16 33 262144" "bf16 64 131080" "bf16 1024 262144")
elif [ "$SET" = cluster_start ]; then
  # shared_balance's cases, and every kernel of clustered teams (as in
  # cluster_exit): the cluster forward (rows over 16,384 values) and
  # backward (over 8,192).
  CHECKS=("bf16 32 262144" "bf16 33 262144" "bf16 5 262144" "bf16 67 131080" "bf16 3 131080"
          "bf16 16384 16384" "f32 16384 16384" "bf16 1001 32768" "bf16 255 65536")
  TIMED=("bf16 32 262144" "bf16 33 262144" "bf16 64 131080" "bf16 1024 262144" "bf16 16384 16384"
         "bf16 32768 16384" "f32 16384 16384" "bf16 4096 65536")
elif [ "$SET" = weight_sum ]; then
  # The backwards whose grid a GPU holds at once (rows of 1,024, the small
  # batch), against rows whose grid it does not.
  CHECKS=("bf16 16384 1024" "bf16 512 4096" "bf16 1001 1024" "f32 17 4096" "f32 16384 1024" "bf16 999 8192"
          "bf16 3 1024")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "f32 16384 1024" "bf16 512 4096" "f32 512 4096" "bf16 16384 4096")
elif [ "$SET" = split_reverse ] || [ "$SET" = square_once ] || [ "$SET" = streamed ]; then
  # Every case of the split-row kernels: float32 rows of 262,144 (forward and,
  # beyond the grid backward, backward) and bfloat16 rows of 524,288.
  CHECKS=("f32 32 262144" "f32 33 262144" "bf16 16 524288" "bf16 7 1000000" "f32 17 131080")
  TIMED=("f32 32 262144" "f32 128 262144" "bf16 16 524288" "bf16 24 524288" "bf16 64 524288")
elif [ "$SET" = row_blocks ]; then
  # Every forward of rows a block holds: teams that do not fill their last
  # vectors (16,376 and 8,200 values), odd row counts, 1024-thread blocks in
  # both dtypes, the small batch.
  CHECKS=("bf16 999 16384" "bf16 1001 16376" "bf16 77 8200" "f32 1001 16384" "bf16 1001 1024" "f32 17 4100"
          "bf16 512 4096" "f32 512 4096")
  TIMED=("bf16 16384 1024" "bf16 16384 4096" "bf16 16384 8192" "bf16 16384 16384" "bf16 32768 1024"
         "bf16 32768 16384" "bf16 512 4096" "f32 16384 1024" "f32 16384 8192" "f32 16384 16384" "f32 512 4096")
elif [ "$SET" = wide_teams ]; then
  # Every backward whose teams share a block: rows of 1,024 and 2,048 values
  # (8 teams of 128 or 256 threads in the variants), bfloat16 rows of 4,096
  # (2 of 512), segments with fewer rows than the rest or none (1001, 17 and
  # 3 rows), and teams of 64 threads (rows of 512), which stay as they were.
  CHECKS=("bf16 16384 1024" "bf16 1001 1024" "bf16 3 1024" "f32 1001 1024" "bf16 999 2048" "f32 17 4096"
          "bf16 1001 4096" "bf16 512 4096" "bf16 1001 512")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 2048" "bf16 16384 4096" "bf16 32768 4096"
         "bf16 512 4096" "f32 16384 1024" "f32 16384 4096" "f32 512 4096")
elif [ "$SET" = bulk_ring ]; then
  # Parts of rows the bulk copies must cut short: 1,000 values (125 of a team's
  # 128 vectors), 16,376 (a cluster's second block short), odd row counts.
  CHECKS=("bf16 16384 1024" "bf16 1001 1000" "bf16 999 16376" "bf16 1001 16384" "f32 1001 4096"
          "f32 999 16376" "bf16 512 4096" "bf16 3 1024")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 4096" "bf16 16384 16384" "bf16 512 4096"
         "f32 16384 1024" "f32 16384 4096")
elif [ "$SET" = sum_start ]; then
  # Segments with fewer rows than the rest or none (1001 and 3 rows), a
  # cluster's second block short (16,376), and the small batch.
  CHECKS=("bf16 16384 1024" "bf16 1001 1024" "bf16 3 1024" "f32 1001 4096" "bf16 999 16376" "bf16 512 4096")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 4096" "bf16 16384 16384" "bf16 512 4096"
         "f32 16384 1024" "f32 512 4096")
elif [ "$SET" = cluster_inv ]; then
  # Rows that take a cluster of 2 (16,384 bfloat16 values, 16,376 with the
  # second block short) or 4 (32,768), and rows a block holds as controls.
  CHECKS=("bf16 999 16376" "f32 999 16376" "bf16 1001 32768" "bf16 1001 16384" "bf16 1001 1024" "f32 1001 4096")
  TIMED=("bf16 16384 16384" "bf16 32768 16384" "f32 16384 16384" "bf16 4096 32768" "bf16 16384 8192"
         "bf16 16384 4096" "bf16 16384 1024" "bf16 512 4096")
elif [ "$SET" = two_vectors ] || [ "$SET" = short_rows ]; then
  # 16-bit rows of at most 1,024 values (a new shape in the variants: two
  # vectors a thread in two_vectors' backward, one in short_rows' forward):
  # part-used teams (1,000, 512 and 96 values), segments with
  # fewer rows than the rest or none (1001 and 3 rows); and rows that keep
  # their kernels as controls.
  CHECKS=("bf16 16384 1024" "bf16 1001 1024" "bf16 3 1024" "bf16 1001 1000" "bf16 1001 512" "bf16 70001 96"
          "f32 1001 1024" "bf16 512 4096")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 512" "bf16 16384 4096" "bf16 512 4096"
         "f32 16384 1024")
elif [ "$SET" = words ]; then
  # Every kernel that reads bfloat16 values: forwards of rows a block holds
  # (part-used teams: 1,000 and 16,376 values; odd row counts), of a cluster
  # (32,768), the shared-row and split-row forwards, the backwards of teams
  # sharing a block, of a block and of a cluster, the grid and split-row
  # backwards; float32 as a control (and its forward of short rows, which
  # words40 caps too).
  CHECKS=("bf16 16384 1024" "bf16 1001 1024" "bf16 1001 1000" "bf16 999 8192" "bf16 1001 16376"
          "bf16 1001 32768" "bf16 512 4096" "bf16 3 1024" "bf16 32 262144" "bf16 7 1000000"
          "bf16 67 131080" "f32 1001 1024" "f32 17 4100")
  TIMED=("bf16 16384 1024" "bf16 32768 1024" "bf16 16384 4096" "bf16 16384 8192" "bf16 16384 16384"
         "bf16 512 4096" "bf16 32 262144" "bf16 16 524288" "f32 16384 1024" "f32 16384 4096")
elif [ "$SET" = cluster_words ]; then
  # The cluster backward: clusters of 2 (16,384 bfloat16 values; 16,376 with
  # the second block short), 4 and 8 blocks, odd row counts; float32 and rows
  # a block holds as controls (their kernels are compiled as in base).
  CHECKS=("bf16 999 16376" "bf16 1001 16384" "bf16 1001 32768" "bf16 67 65536" "f32 999 16376" "bf16 1001 1024")
  TIMED=("bf16 16384 16384" "bf16 32768 16384" "bf16 4096 32768" "bf16 2048 65536" "bf16 16384 4096"
         "bf16 16384 1024" "f32 16384 16384")
elif [ "$SET" = shared16 ] || [ "$SET" = cluster16 ]; then
  # The shared-row forward: the seed shape, rows that leave a cluster's last
  # blocks part-used (131,080 values), odd row counts, rows of a second
  # round (1,024 rows); float32 rows of 262,144 (the split-row kernels in
  # base); the other cluster kernels (rows of 16,384 and 32,768) and rows a
  # block holds as controls.
  CHECKS=("bf16 32 262144" "bf16 33 262144" "bf16 67 131080" "bf16 5 262144" "f32 32 262144" "f32 17 131080"
          "bf16 1001 16384")
  TIMED=("bf16 32 262144" "bf16 1024 262144" "bf16 64 131080" "f32 32 262144" "f32 128 262144"
         "bf16 16384 16384" "bf16 4096 32768" "bf16 16384 1024")
elif [ "$SET" = grid_forward ]; then
  # The grid forward: the seed shape in both types, a row count that leaves
  # a thread group one row more than the others (33), blocks whose last
  # columns lie past the row's end (7 x 1,000,000), few rows (5); rows whose
  # sums do not fit chunk_sums (67 x 131,080) or too many to hold (1,024 x
  # 262,144) take the shared-row forward as before; a cluster forward as a
  # control.
  CHECKS=("bf16 32 262144" "f32 32 262144" "bf16 33 262144" "bf16 7 1000000" "bf16 5 262144" "bf16 67 131080"
          "bf16 1001 16384")
  TIMED=("bf16 32 262144" "f32 32 262144" "bf16 16 524288" "f32 16 262144" "bf16 64 131080" "bf16 1024 262144"
         "bf16 16384 16384")
elif [ "$SET" = last_use ]; then
  # The grid backward's cases and every shape of FastBackwardKernel.
  CHECKS=("${GRID_CHECKS[@]}" "${BACKWARD_CHECKS[@]}")
  TIMED=("bf16 32 262144" "f32 16 262144" "bf16 16384 1024" "bf16 16384 16384" "bf16 512 4096")
elif [ "$SET" = profiles ]; then
  # No variants: ncu on the kernels of the cases that miss their targets.
  CHECKS=("bf16 32 262144" "bf16 512 4096" "bf16 16384 1024")
  TIMED=("bf16 32 262144" "bf16 512 4096" "bf16 16384 1024")
  NCU_FULL=("fwd bf16 32 262144" "fwd bf16 512 4096" "bwd bf16 16384 1024")
else
  CHECKS=("bf16 16384 1024" "bf16 32 262144" "f32 16384 1024" "bf16 512 4096")
  TIMED=("bf16 16384 1024" "bf16 16384 4096" "bf16 16384 16384" "bf16 32 262144" "bf16 512 4096"
         "f32 16384 1024" "f32 16384 16384" "f32 32 262144")
fi
INC=$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for name in $VARIANTS; do
  ( nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas=--warn-on-spills \
      -Ivariants/$name -I"$INC" bench_kernels.cu -o /tmp/bench_$name > /tmp/build_$name.txt 2>&1
    echo "built $name rc=$?"
    grep -o "spilled to local memory in function '[^']*', [0-9]* bytes spill stores" /tmp/build_$name.txt |
      grep -v "slowpath" | sed "s/^/  $name: /" ) &
done
wait
echo "== results against a float64 host reference (max error / max value)"
for v in $VARIANTS; do
  for c in "${CHECKS[@]}"; do
    BENCH_CHECK=1 /tmp/bench_$v $v $c | grep -A1 "check:" | paste - - | awk '{$1=$1; print}'
  done
done
echo "== CUDA events, median of 21 runs of 20 launches; two rounds"
/tmp/bench_base base bf16 512 4096 | head -1
for round in 1 2; do
  for v in $VARIANTS; do
    for c in "${TIMED[@]}"; do
      /tmp/bench_$v $v $c | grep -v "host us\|copy"
    done
  done
done
for c in "${NCU[@]}"; do
  for v in $VARIANTS; do
    echo "== ncu $v bwd $c (--cache-control none: L2 as the kernels before left it)"
    BENCH_ONLY=bwd ncu --cache-control none --clock-control none -k 'regex:Chunk|SumPartials|Grid' -s 30 -c 3 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
      /tmp/bench_$v $v $c 2>&1 | grep -E "Kernel|gpu__|dram__|lts__" | sed 's/^ *//'
  done
done
for c in "${NCU_FULL[@]}"; do
  # Every section of the forward or backward kernel (DIRECTION DTYPE ROWS LEN)
  # of the base kernels, then its SASS lines with the most warp-stall samples.
  read -r direction case <<< "$c"
  rep=/tmp/full_${c// /_}
  BENCH_ONLY=$direction ncu --set full --import-source no -k 'regex:Forward|Backward' -s 30 -c 1 -f \
    -o $rep /tmp/bench_base base $case > /dev/null 2>&1
  echo "== ncu --set full base $c"
  ncu --import $rep.ncu-rep --page details --print-units base 2>&1 | sed 's/^ *//' | grep -v "^$\|^---"
  echo "== ncu source base $c: the 25 SASS lines with the most warp-stall samples"
  ncu --import $rep.ncu-rep --page source --print-source sass --csv 2>&1 | python3 top_stalls.py 25
done
