"""One short summary of a machine's GPU checks, from the logs gpu_checks.sh wrote.

    python tools/gpu_checks_summary.py --out results/gpu/<machine>.json [--update]
                                       OUTDIR [OUTDIR ...]

Each OUTDIR is one tools/gpu_checks.sh run (a long check is split over
several, by step and by test selection); each holds its environment.txt and
the logs of the steps it ran. The summary keeps what a reader needs and no
log: the machine (from the last run), and for every step of every run its
commit, date, JAX version, test selection and processes, its counts
(passed, failed, skipped, ...), the names of failed tests, compute-sanitizer's
error counts per tool, the template's and the recipes' tests and their
compute-sanitizer counts, whether XLA ran the float8 norm's matmul as a
float8 matmul, and the collectives XLA compiled for a mesh of the machine's
GPUs. With
--update, the checks already in the --out file stay where the new runs do
not redo them (a check is the same where its kind and test selection are):
a check rerun at a later commit replaces its earlier result in place.
"""

import argparse
import json
import pathlib
import re
import sys

COUNTS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")


def environment(text):
    """The fields of an environment.txt that gpu_checks.sh wrote."""
    lines = text.splitlines()
    fields = {"devices": [line for line in lines if line.startswith("device ")],
              "gpus": sum(line.startswith("NVIDIA ") for line in lines)}
    for line in lines:
        key, _, value = line.partition(": ")
        if key in ("date", "commit", "pytest selection", "hypothesis profile", "test processes",
                   "chapters"):
            fields[key.replace(" ", "_")] = value
        elif line.startswith("NVIDIA "):
            fields["gpu"], fields["driver"], fields["memory"] = line.split(", ")
        elif line.startswith("Cuda compilation tools"):
            fields["nvcc"] = line.split("release ")[1].split(",")[0]
        elif line.startswith("jax "):
            fields["jax"] = line.split()[1]
        elif line.startswith("python "):
            fields["python"] = line.split()[1]
    return fields


def outcomes_so_far(log):
    """The counts of the outcomes a verbose (-v) run reported as it went, in
    one process ("tests/x.py::test PASSED [ 4%]") or several ("[gw3] [ 4%]
    PASSED tests/x.py::test"), and the tests that failed or were in error:
    what a run cut off before its summary got through."""
    outcome = r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
    one = re.findall(rf"^(\S+::.+?) {outcome}\s+\[\s*\d+%\]$", log, re.M)
    several = [(test, word) for word, test in
               re.findall(rf"^\[gw\d+\] \[\s*\d+%\] {outcome} (.+?)\s*$", log, re.M)]
    names = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped",
             "XFAIL": "xfailed", "XPASS": "xpassed"}
    counts = {}
    for _, word in one + several:
        counts[names[word]] = counts.get(names[word], 0) + 1
    failures = {test for test, word in one + several if word in ("FAILED", "ERROR")}
    return {**counts, "failures": sorted(failures)}


def pytest_counts(log):
    """The counts of pytest's last summary line, and the failed tests' names;
    for a run cut off before that line, those it reported until then."""
    summaries = [line for line in log.splitlines()
                 if re.search(r"\d+ (passed|failed|errors?)\b", line) and " in " in line]
    if not summaries:
        return {"completed": False, **outcomes_so_far(log)}
    counts = {"completed": True}
    for number, word in re.findall(r"(\d+) (\w+)", summaries[-1]):
        word = "errors" if word == "error" else word
        if word in COUNTS:
            counts[word] = int(number)
    # A test's id may hold spaces (its parameters); " - " starts the message.
    counts["failures"] = sorted(set(re.findall(r"^FAILED (.+?)(?: - .*)?$", log, re.M)))
    return counts


def sanitizer_counts(log):
    """{tool: {"errors": n, "exit_status": s}} of a compute_sanitizer.log."""
    tools, current = {}, None
    for line in log.splitlines():
        if m := re.match(r"== compute-sanitizer --tool (\w+)", line):
            current = tools.setdefault(m.group(1), {})
        elif current is not None and (m := re.search(r"SUMMARY: (\d+) (?:errors|hazards)", line)):
            current["errors"] = int(m.group(1))
        elif m := re.match(r"== (\w+) exit status: (\d+)", line):
            tools.setdefault(m.group(1), {})["exit_status"] = int(m.group(2))
    return tools


# The sweep's logs (tests/test_gpu_sweep.py): with the GPU's own plans, and
# with those of a GPU without clusters.
SWEEPS = {"sweep.log": "sweep", "sweep_without_clusters.log": "sweep (plans without clusters)"}
# The sweep's test of a case on the GPU: its outcomes are the sweep's word on
# the kernels (the file's other tests check the generator, as CI does).
SWEEP_CASE_TEST = "test_the_kernels_give_the_reference_answer["


def kernel_cases(log):
    """The outcomes of the sweep's cases in a verbose log: their counts, and
    the cases that failed."""
    lines = "\n".join(line for line in log.splitlines() if SWEEP_CASE_TEST in line)
    return outcomes_so_far(lines)


# The logs of one pytest run each, and of compute-sanitizer's tools, by the
# check each records: the chapters, the template (the book's tests of a
# renamed copy, and the template's own tests) and the recipes (each built
# with nvcc and run on the GPU), and the sanitizers over gpu_ops' kernels,
# the template's and the recipes'.
PYTEST_LOGS = {"nbval.log": "chapters (nbval)", "template.log": "template",
               "template_own_tests.log": "template's own tests", "recipes.log": "recipes"}
SANITIZER_LOGS = {"compute_sanitizer.log": "compute-sanitizer",
                  "template_sanitizer.log": "template compute-sanitizer",
                  "recipes_sanitizer.log": "recipes compute-sanitizer"}


def run_summary(outdir):
    """The checks of one gpu_checks.sh run."""
    env = environment((outdir / "environment.txt").read_text())
    common = {k: env[k] for k in ("commit", "date", "jax") if k in env}
    checks = []
    if (log := outdir / "build_and_tests.log").exists():
        checks.append({"check": "tests", **common,
                       "selection": env.get("pytest_selection", ""),
                       "hypothesis_profile": env.get("hypothesis_profile", ""),
                       **({"processes": int(env["test_processes"])}
                          if "test_processes" in env else {}),
                       **pytest_counts(log.read_text())})
    for name, check in SWEEPS.items():
        if (log := outdir / name).exists():
            text = log.read_text()
            checks.append({"check": check, **common, **pytest_counts(text),
                           "kernel_cases": kernel_cases(text)})
    if (log := outdir / "properties.log").exists():
        text = log.read_text()
        profile = re.search(r"^hypothesis profile: (\S+)", text, re.M)
        checks.append({"check": "property test", **common,
                       "hypothesis_profile": profile.group(1) if profile else "",
                       **pytest_counts(text)})
    # The chapters a run of some of them ran are its selection (a run of all
    # has none, as before chapters could be chosen).
    chapters = env.get("chapters", "chapters")
    selections = {"nbval.log": "" if chapters == "chapters" else chapters}
    for name, check in PYTEST_LOGS.items():
        if (log := outdir / name).exists():
            selection = ({"selection": selections[name]} if selections.get(name) else {})
            checks.append({"check": check, **common, **selection,
                           **pytest_counts(log.read_text())})
    for name, check in SANITIZER_LOGS.items():
        if (log := outdir / name).exists():
            checks.append({"check": check, **common, "tools": sanitizer_counts(log.read_text())})
    if (found := outdir / "fp8_matmul.json").exists():
        record = json.loads(found.read_text())
        checks.append({"check": "fp8 matmul", **common,
                       **{k: record[k] for k in ("shape", "fp8_matmul", "custom_call_targets",
                                                  "matmul_lines", "through_fp8")
                          if k in record}})
    if (found := outdir / "sharding_hlo.json").exists():
        record = json.loads(found.read_text())
        checks.append({"check": "sharding collectives", **common,
                       **{k: record[k] for k in ("devices", "x", "programs")}})
    return env, checks


def summary(outdirs):
    checks, env = [], {}
    for outdir in outdirs:
        env, run_checks = run_summary(pathlib.Path(outdir))
        checks += run_checks
    machine = {k: env[k] for k in ("gpu", "gpus", "driver", "memory", "nvcc", "python", "jax",
                                   "devices") if k in env}
    return {"machine": machine, "checks": checks}


# pytest options that say how tests run, not which: a selection with them
# names the same tests as one without (older runs put the number of
# processes there).
_NOT_SELECTING = re.compile(r"(^|\s)(-n\s+\S+|--dist\s+\S+|-p\s+no:cacheprovider)(?=\s|$)")


def _key(check):
    selection = _NOT_SELECTING.sub(" ", check.get("selection", ""))
    return check["check"], " ".join(selection.split())


def updated(old, new):
    """The summary `old` with the checks of the summary `new`: each replaces
    the one of its kind and selection in place, or follows the others; the
    machine is new's."""
    fresh = {_key(check): check for check in new["checks"]}
    kept = [fresh.pop(_key(check), check) for check in old["checks"]]
    return {"machine": new["machine"], "checks": kept + list(fresh.values())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--update", action="store_true",
                        help="keep the checks of --out that the runs do not redo")
    parser.add_argument("outdirs", nargs="+", type=pathlib.Path,
                        help="gpu_checks.sh output folders, oldest first")
    args = parser.parse_args(argv)
    for outdir in args.outdirs:
        if not (outdir / "environment.txt").is_file():
            parser.error(f"{outdir} has no environment.txt: not a gpu_checks.sh output folder")
    found = summary(args.outdirs)
    if args.update and args.out.exists():
        found = updated(json.loads(args.out.read_text()), found)
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
