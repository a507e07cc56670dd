"""What the bench's fresh-process scripts measure of themselves: resident memory and latency."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Dict, Sequence


def rss_mb() -> float:
    """This process's resident memory (``VmRSS``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def latency_ms(seconds: Sequence[float]) -> Dict[str, float]:
    """``{"p50_ms", "p95_ms"}`` of call times given in seconds."""
    ms = sorted(1000 * x for x in seconds)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[int(0.95 * (len(ms) - 1))]}


__all__ = ["latency_ms", "rss_mb"]
