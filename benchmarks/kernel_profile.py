"""The GPU kernels a piece of work ran, and their time, from JAX's profiler.

A timed run says how long work took; a profile of it says where that time
went: which kernels ran, how long each took, and how much of the time the
GPU ran none (between kernels, or waiting for the host). Both benchmarks
use it: the training step for the norms' share of a step, the norm
benchmark for what its kernels take of an op's time.
"""

import collections
import pathlib
import tempfile

import jax


def traced(work):
    """(work(), the jax.profiler.ProfileData of its run). work must wait for
    its own results (jax.block_until_ready), so that the trace holds them."""
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            result = work()
        trace, = pathlib.Path(folder).rglob("*.xplane.pb")
        return result, jax.profiler.ProfileData.from_file(str(trace))


def gpu_events(profile):
    """The kernels (and memsets) the GPU ran: the events of its planes'
    stream lines."""
    return [event for plane in profile.planes if plane.name.startswith("/device:GPU")
            for line in plane.lines if line.name.startswith("Stream")
            for event in line.events]


def kernel_times(profile, count, top):
    """From a profile of `count` units of work (steps, ops), in nanoseconds
    per unit: the kernels' time ("kernel"), gpu_ops' kernels' part of it
    ("gpu_ops_kernel"), the time in which at least one kernel ran ("busy";
    kernels of several streams may overlap) and the time from the first
    kernel's start to the last one's end ("span"); and the `top` kernels
    that took the most time, as [name, nanoseconds per unit] ("top_kernels")."""
    events = gpu_events(profile)
    every = sum(event.duration_ns for event in events)
    ours = sum(event.duration_ns for event in events if "gpu_ops" in event.name)
    busy, reached = 0.0, float("-inf")  # the union of the events' intervals
    for event in sorted(events, key=lambda event: event.start_ns):
        busy += max(0.0, event.end_ns - max(event.start_ns, reached))
        reached = max(reached, event.end_ns)
    span = (max(e.end_ns for e in events) - min(e.start_ns for e in events)) if events else 0.0
    by_name = collections.Counter()
    for event in events:
        by_name[event.name] += event.duration_ns
    totals = {"kernel": every, "gpu_ops_kernel": ours, "busy": busy, "span": span}
    return {**{key: ns / count for key, ns in totals.items()},
            "top_kernels": [[name, ns / count] for name, ns in by_name.most_common(top)]}


def short_name(kernel):
    """A kernel's name without its return type, namespaces, template
    arguments and parameters: "void gpu_ops::(anonymous
    namespace)::FastForwardKernel<float, 1>(...)" is "FastForwardKernel"."""
    name = kernel.replace("(anonymous namespace)::", "").removeprefix("void ")
    for end in "<(":
        name = name.split(end)[0]
    return name.split("::")[-1]
