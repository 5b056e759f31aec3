"""The machine a benchmark ran on, and its load, as every benchmark prints them (imported by the
scripts beside it: `python benchmarks/X.py` puts this folder on the path)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """The OS, the CPU's model, its cores, the memory and Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{platform.system()} {platform.release()}, {platform.machine()} {cpu}, "
            f"{os.cpu_count()} cores{mem}, Python {platform.python_version()}")


def load() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
