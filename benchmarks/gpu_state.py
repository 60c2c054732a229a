"""What the GPU's clock and power were while a benchmark ran, from nvidia-smi.

A GPU at its power limit lowers its clock until its power is within it, so
a step of many matmuls can run slower than its kernels run in a short,
cooler profile. `Sampler` reads nvidia-smi's samples (every PERIOD_S) on a
thread while it is open, stamped with time.perf_counter(), from the first
one on; `summary` gives, over the samples within given intervals (widened by
a period, so that an interval shorter than one still has its neighbours),
the median SM clock and power, the GPU's maximum clock and power limit, and
the share of samples in which the GPU held its clock down for its power
limit. Without nvidia-smi there are no samples and no summary.
"""

import shutil
import statistics
import subprocess
import threading
import time

#: Seconds between nvidia-smi's samples.
PERIOD_S = 0.1
#: Seconds Sampler waits for nvidia-smi's first sample.
FIRST_SAMPLE_S = 10.0
#: nvidia-smi's fields, in the order of its CSV lines.
FIELDS = ("clocks.sm", "clocks.max.sm", "power.draw", "enforced.power.limit",
          "clocks_event_reasons.sw_power_cap", "temperature.gpu")


def parse(line):
    """One nvidia-smi CSV line (no units) as {field: float}, the power cap as
    0 or 1; None for a line that is not one (a header, an error, "[N/A]")."""
    values = [value.strip() for value in line.split(",")]
    if len(values) != len(FIELDS):
        return None
    try:
        return {field: (1.0 if value == "Active" else 0.0 if value == "Not Active"
                        else float(value))
                for field, value in zip(FIELDS, values)}
    except ValueError:
        return None


class Sampler:
    """Context manager: `samples`, [(perf_counter seconds, parse(line))], of GPU 0."""

    def __init__(self):
        self.samples = []
        self._command = (["nvidia-smi", "--id=0", f"--query-gpu={','.join(FIELDS)}",
                          "--format=csv,noheader,nounits", f"-lms={round(PERIOD_S * 1000)}"]
                         if shutil.which("nvidia-smi") else None)
        self._process = self._thread = None

    def __enter__(self):
        if self._command:
            self._process = subprocess.Popen(self._command, stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
            deadline = time.perf_counter() + FIRST_SAMPLE_S
            while not self.samples and self._thread.is_alive() and time.perf_counter() < deadline:
                time.sleep(0.01)
        return self

    def _read(self):
        for line in self._process.stdout:
            sample = parse(line)
            if sample is not None:
                self.samples.append((time.perf_counter(), sample))

    def __exit__(self, *exc):
        if self._process:
            self._process.terminate()
            self._process.wait()
            self._thread.join()
        return False


def summary(samples, intervals):
    """Over the samples within any of `intervals` ([(start, end)] in
    perf_counter seconds), each widened by PERIOD_S: median SM clock (MHz)
    and power (W), the maximum clock and the power limit, and the share of
    samples at the power cap; None without such samples."""
    inside = [s for t, s in samples
              if any(start - PERIOD_S <= t <= end + PERIOD_S for start, end in intervals)]
    if not inside:
        return None

    def median(field):
        return statistics.median(s[field] for s in inside)
    return {"samples": len(inside), "sm_clock_mhz": median("clocks.sm"),
            "max_sm_clock_mhz": median("clocks.max.sm"), "power_w": median("power.draw"),
            "power_limit_w": median("enforced.power.limit"),
            "power_capped": statistics.fmean(s["clocks_event_reasons.sw_power_cap"]
                                             for s in inside),
            "temperature_c": median("temperature.gpu")}
