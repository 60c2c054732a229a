"""Compile an exercise's handlers into shared libraries and load them.

`build_library(folder)` compiles the folder's C++ files (`*.cc`) with the
host compiler and, where `nvcc` is found, its CUDA files (`*.cu`) (or the
files it names, `sources=`), each set
into a shared library that `ctypes` loads, against XLA's FFI headers from
`jax.ffi.include_dir()`. The handlers are then attributes of the loaded
libraries, as JAX's FFI tutorial loads its own: `library.cpu.SoftmaxCpu`.

Each build goes into a folder named after a hash of its sources, so an
unchanged folder is compiled once, and a changed one gives new libraries
(and with them new handler addresses: XLA keeps the first handler registered
under a name for the life of the process, so each build's handlers need a
name of their own, `library.name`).
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jax

REPOSITORY = Path(__file__).resolve().parent.parent
# sm_80 and sm_90 code, and PTX that newer GPUs compile when they load it
CUDA_ARCHITECTURES = ("-gencode=arch=compute_80,code=sm_80",
                      "-gencode=arch=compute_90,code=[sm_90,compute_90]")


@dataclass(frozen=True)
class Library:
    name: str  # a target name for this build's handlers
    cpu: ctypes.CDLL  # the C++ handlers
    cuda: ctypes.CDLL | None  # the CUDA handlers, where nvcc was found

    def register(self, cpu_handler, cuda_handler, name=None):
        """Register the handlers of these names under `name` (this build's by
        default), each for its platform (the CUDA one where nvcc built it)."""
        for platform, handlers, handler in (("cpu", self.cpu, cpu_handler),
                                            ("CUDA", self.cuda, cuda_handler)):
            if handlers is not None:
                jax.ffi.register_ffi_target(name or self.name, jax.ffi.pycapsule(
                    getattr(handlers, handler)), platform=platform)


def nvcc():
    """nvcc's path, or None where there is none."""
    found = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return found if os.access(found, os.X_OK) else None


def _compile(command, output):
    """Run the compiler `command`, which writes `output`, unless it is there."""
    if not output.exists():
        # into a file of this process's own, renamed when whole: processes
        # that build the same sources at once (test workers) never load half a file
        partial = output.with_name(f"{output.name}.{os.getpid()}")
        built = subprocess.run([*command, "-o", str(partial)], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"compiling failed:\n{' '.join(command)}\n{built.stderr}")
        os.replace(partial, output)
    return ctypes.CDLL(str(output))


def build_library(folder, name="my_softmax", sources=None):
    """Build (once per content) and load the handlers of `folder` (relative
    to the repository, or absolute)."""
    folder = REPOSITORY / folder
    sources = ([folder / s for s in sources] if sources
               else sorted(folder.glob("*.cc")) + sorted(folder.glob("*.cu")))
    headers = sorted(folder.glob("*.h"))  # what the sources include from beside them
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources + headers))
    digest = digest.hexdigest()[:12]
    out = REPOSITORY / "build" / "exercises" / f"{name}-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    flags = ["-std=c++17", "-O2", "-shared", "-isystem", jax.ffi.include_dir()]
    cpu_files = [str(p) for p in sources if p.suffix == ".cc"]
    cpu = _compile([os.environ.get("CXX", "c++"), *flags, "-fPIC", "-Wall", *cpu_files],
                   out / "libcpu.so")
    cuda_files = [str(p) for p in sources if p.suffix == ".cu"]
    cuda = None
    if cuda_files and nvcc():
        cuda = _compile([nvcc(), *flags, "-Xcompiler=-fPIC", *CUDA_ARCHITECTURES, *cuda_files],
                        out / "libcuda.so")
    return Library(f"{name}_{digest}", cpu, cuda)
