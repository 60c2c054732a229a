"""A subset of the GPU sweep (tests/sweep_cases.py), for compute-sanitizer:
the smallest case of every kernel path the planner chooses on this GPU, for
each kind of call and dtype pair (with --few, for each kind of call only),
run without the float64 reference, which a sanitizer does not need.

Run as: compute-sanitizer --tool memcheck python tools/sanitizer_workload.py [--few]
"""

import pathlib
import sys

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import sweep_cases  # noqa: E402

jax.config.update("jax_enable_x64", True)  # the float64 cases, as the tests have them


def main(argv):
    few = "--few" in argv
    cases = sweep_cases.subset(sweep_cases.cases(), by_dtype=not few)
    print(f"{len(cases)} cases", flush=True)
    for case in cases:
        sweep_cases.run(case, check=False)
        print("ok", case.id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
