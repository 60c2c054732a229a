"""Which CUDA kernels run an RMS norm call, on the current GPU or a described one.

The CUDA handlers choose their kernels with one planner (``csrc/plan/rms_norm_plan.h``).
:func:`kernel_plan` asks it the question a handler asks: on the current GPU
(``gpu=None``, in a build with CUDA), the answer the handler would act on; on
a :class:`GpuModel`, on any machine, the answer that GPU would get, from a
model of how many blocks it holds at once (``csrc/plan/described_gpu.h``).
"""

import dataclasses
import math
import numbers

import jax

from gpu_ops import _native, ffi_targets
from gpu_ops.validation import check_dtype


@dataclasses.dataclass(frozen=True)
class GpuModel:
    """The numbers of a GPU that decide its kernel plans."""

    name: str
    sms: int
    clusters: bool  # runs thread-block clusters (sm_90 and newer)
    shared_bytes_per_sm: int
    shared_bytes_per_block: int  # the most one block may ask for
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    registers_per_sm: int = 65536


#: An NVIDIA A100 (sm_80): no clusters.
A100 = GpuModel("A100", sms=108, clusters=False,
                shared_bytes_per_sm=167_936, shared_bytes_per_block=166_912)
#: An NVIDIA H100 SXM (sm_90).
H100 = GpuModel("H100", sms=132, clusters=True,
                shared_bytes_per_sm=233_472, shared_bytes_per_block=232_448)

DIRECTIONS = ("forward", "backward")
#: The kernel paths, in the order the planner tries them (rms_norm_plan.h);
#: the last, the general kernels, takes every input and is never left out.
PATHS = tuple(_native.kernel_paths)


def kernel_plan(direction, shape, dtype, gpu=None, without=(), weight_dtype=None,
                residual=False):
    """The plan of the CUDA call on x of `shape` and `dtype` and a weight of
    `weight_dtype` (default: x's) over x's last axis, as a dict: "path"; the
    CUDA "kernels" it launches, in order; the first one's launch ("blocks",
    "threads" a block, "cluster" blocks a cluster, "shared_bytes" of dynamic
    shared memory; the general kernels size their own); what the path gives
    each thread, block or cluster, under names that say so (such as
    "rows_per_block", "lanes_per_row", "vectors_per_thread"); and under
    "refused" the paths the planner tried first, in order, each as (path,
    why it passed it over).

    direction: "forward" or "backward". gpu: None for the current GPU (a build
    with CUDA kernels, on a GPU), else a :class:`GpuModel`. without: names of
    paths to leave out (PATHS, the general kernels excepted), for a described
    GPU; the current GPU's handlers leave out those that :func:`leave_out`
    named. residual: the
    forward with a residual add (``rms_norm(..., residual=r)``).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not isinstance(gpu, (GpuModel, type(None))):
        raise TypeError(f"gpu must be a GpuModel or None, got {type(gpu).__name__}")
    _check_path_names("without", without)
    if gpu is None and not (ffi_targets.CUDA_COMPILED and jax.default_backend() == "gpu"):
        raise ValueError("gpu=None asks the current GPU, and there is none with gpu_ops' "
                         "CUDA kernels here: pass a GpuModel, such as kernel_plans.H100")
    if not (isinstance(shape, (tuple, list)) and all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in shape)):
        raise TypeError(f"shape must be a tuple or list of integers, got {shape!r}")
    shape = tuple(int(n) for n in shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"shape must be a non-empty shape without zeros, got {shape}")
    rows, row_length = math.prod(shape[:-1]), shape[-1]
    dtype = check_dtype("dtype", dtype, "kernel_plan")
    dtype_name = dtype.name
    if weight_dtype is not None:
        weight_dtype = check_dtype("weight_dtype", weight_dtype, "kernel_plan")
        if weight_dtype != dtype:
            # The fast kernels for the rows of models take 16-bit x with a
            # float32 weight too; the others, one dtype only.
            dtype_name = f"{dtype.name}/{weight_dtype.name}"
    return _native.plan(direction, rows, row_length, dtype_name, gpu, ",".join(without),
                        bool(residual))


def leave_out(paths=(), clusters=False):
    """Make every CUDA handler of this process plan without `paths` (names
    from PATHS, the general kernels excepted) and, with `clusters`, as for a
    GPU without clusters (such as an A100): for benchmarks and tests that
    run and measure each path on one GPU. ``leave_out()`` restores the full
    plans. The handlers read this setting, not the environment, at each call."""
    _check_path_names("paths", paths)
    _native.leave_out_of_plans(",".join(paths), bool(clusters))


def left_out():
    """(paths, clusters): what :func:`leave_out` last set."""
    names, clusters = _native.left_out_of_plans()
    return tuple(name for name in names.split(",") if name), clusters


def _check_path_names(argument, paths):
    if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
        raise TypeError(f"{argument} must be a sequence of path names, got {paths!r}")
