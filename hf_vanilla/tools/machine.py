"""What a benchmark report says first: the command that made it and the machine it ran on, with the load on
the machine before and after, which tells a quiet run from a disturbed one on shared cores."""

import os
import shlex
import sys

from hf_vanilla.precision import cpu_description


def run_record(load_before: tuple[float, float, float]) -> dict:
    """The command line, the CPU (`cpu_description`), the cores and the 1-minute load average at the start
    (`load_before`, `os.getloadavg()` then) and now."""
    return {
        "command": shlex.join(["python", *sys.argv]),
        "cpu": cpu_description(),
        "cores": os.cpu_count(),
        "load_average_before_and_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
