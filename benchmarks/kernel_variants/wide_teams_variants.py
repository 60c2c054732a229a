"""The kernel variants of the run in h200_wide_teams.log (make_variants.py wide_teams).

The bfloat16 forward + backward of 16384 x 1,024 reaches 78.7% of the copy
bandwidth on an H200 (benchmarks/results/nvidia-h200.json), just under the
80% target. Its backward gives each row to a team of 128 threads, four teams
to a block of 512, and each block writes one float32 partial row of the
weight gradient for SumPartials to add up: 256 rows of 4 KiB. Without that
sum the backward took about 3 µs less (h200_weight_sum.log). Blocks of 1024
threads (one an SM, as two of 512 were) would write half as many partial
rows for the same rows in flight:
- `t1024`: teams of 128 threads or more share blocks of up to 1024 threads
  (rows of 1,024 values: 8 teams; bfloat16 rows of 4,096, the small batch
  among them: 2 teams);
- `t1024s`: only teams of 128 or 256 threads do (rows of 1,024 or 2,048
  values).
Teams of 64 threads stay in blocks of 512: TeamSum gives each team a named
barrier, and a block has 16 (one of them __syncthreads').
"""
from make_variants import FAST

COMMIT = "055a308"

TEAMS = "      const int teams = cluster == 1 ? std::max(1, kTeamBlockThreads / team) : 1;\n"


def wide_blocks(condition):
    """Teams for which `condition` holds share blocks of up to 1024 threads."""
    return {FAST: [(TEAMS, TEAMS.replace(
        "kTeamBlockThreads / team",
        f"({condition} ? kMaxThreads : kTeamBlockThreads) / team"))]}


VARIANTS = {
    "base": ("the kernels of 055a308 (those of 5926f00)", {}),
    "t1024": ("teams of 128 threads or more in blocks of up to 1024 threads",
              wide_blocks("team >= 128")),
    "t1024s": ("teams of 128 or 256 threads in blocks of 1024 threads",
               wide_blocks("team >= 128 && team <= 256")),
}
