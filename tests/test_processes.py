"""Several processes, as JAX runs across hosts: two processes on this machine
join through ``jax.distributed`` (CPU collectives between them), each with
two CPU devices, and check gpu_ops on a mesh over all four devices
(tests/process_worker.py). On a machine with two GPUs, the GPU checks run
the same with one process per GPU (``GPU_OPS_PROCESS_PLATFORM=gpu``)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

PROCESSES = 2
TIME_LIMIT = 300  # seconds for the whole run, far more than it needs


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_processes(platform):
    """Start the processes; return their (exit status, output), ending them all
    as soon as one fails, so that the others do not wait for it forever."""
    tests = Path(__file__).parent
    coordinator = f"127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tests), env.get("PYTHONPATH")]))
    started = []
    for process_id in range(PROCESSES):
        if platform == "gpu":
            env = {**env, "CUDA_VISIBLE_DEVICES": str(process_id)}
        started.append(subprocess.Popen(
            [sys.executable, str(tests / "process_worker.py"), coordinator, str(PROCESSES),
             str(process_id), platform],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + TIME_LIMIT
    try:
        while any(p.poll() is None for p in started):
            failed = [p for p in started if p.poll() not in (None, 0)]
            assert not failed and time.monotonic() < deadline, (
                "a process failed or the run took too long; "
                f"exit statuses {[p.poll() for p in started]}")
            time.sleep(0.5)
    except AssertionError as error:
        for p in started:
            p.kill()
        outputs = [p.communicate()[0] for p in started]
        tails = "\n".join(f"--- process {i} ---\n" + "\n".join(o.splitlines()[-25:])
                          for i, o in enumerate(outputs))
        raise AssertionError(f"{error}\n{tails}") from None
    return [(p.returncode, p.communicate()[0]) for p in started]


def test_two_processes_give_the_reference_answers():
    platform = os.environ.get("GPU_OPS_PROCESS_PLATFORM", "cpu")
    results = _run_processes(platform)
    for process_id, (status, output) in enumerate(results):
        assert status == 0, output
        # every implementation, with a row count the mesh divides and one it does not
        assert output.count(" ok") == 6, output
