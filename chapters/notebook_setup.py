"""What the first cell of every chapter sets up, before JAX is imported.

The repository's root is importable (the exercises' helpers are there),
JAX gets 8 CPU devices (on a GPU machine the GPUs stay as they are), jaxprs
print without terminal colours, any deprecated JAX API the notebook's own
code calls is an error, as in the test suite, and the errors a chapter
teaches show as their type and message, without the frames of JAX's
internals.
"""

import os
import sys
import warnings
from pathlib import Path

from IPython import get_ipython

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
os.environ["JAX_PPRINT_USE_COLOR"] = "false"
warnings.filterwarnings("error", category=DeprecationWarning, module="__main__")
get_ipython().run_line_magic("xmode", "Minimal")
