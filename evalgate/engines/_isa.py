"""What this CPU can execute, not only what it advertises.

vLLM's CPU backend picks its kernels from the CPU's flags: an FP8 KV cache needs AVX-512 or AMX
("FP8 KV cache on CPU requires x86 with AVX-512 or AMX", vllm/v1/attention/backends/cpu_attn.py),
and an AVX2-only CPU fails that only after a minute of startup. Machines here have differed: one
advertised AMX it could not execute, which a flag check would have trusted. So each instruction
set is tried for real: one instruction of it runs in a child process, and SIGILL says no.
"""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evalgate.errors import ConfigError

__all__ = ["PROBES", "IsaReport", "cpu_flags", "executes", "isa_report", "require_any"]

PROBES: dict[str, tuple[str, bytes]] = {
    # flag in /proc/cpuinfo -> (what it is, machine code ending in ret)
    "avx2": ("AVX2", bytes.fromhex("c5fdefc0c3")),  # vpxor ymm0, ymm0, ymm0; ret
    "avx512f": ("AVX-512", bytes.fromhex("62f17d48efc0c3")),  # vpxord zmm0, zmm0, zmm0; ret
    "amx_tile": ("AMX", bytes.fromhex("c4e27849c0c3")),  # tilerelease; ret (after the kernel's permission)
}
"""One instruction per instruction set, as x86-64 machine code."""

_RUN = r"""
import ctypes, mmap, sys
code = bytes.fromhex(sys.argv[1])
if sys.argv[2] == "amx":  # Linux grants AMX tile data per process: ARCH_REQ_XCOMP_PERM, XTILEDATA
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(158, 0x1023, 18)
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()
print("ok")
"""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The flags the CPU advertises (the first processor's), or none where there is no cpuinfo."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def executes(code: bytes, *, amx: bool = False, timeout_s: float = 30.0) -> bool | None:
    """Whether ``code`` runs in a child: True, False on SIGILL, None when it could not be tried
    (not x86-64, or no executable memory for the child)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RUN, code.hex(), "amx" if amx else "-"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 0 and proc.stdout.strip() == "ok":
        return True
    return False if proc.returncode == -signal.SIGILL else None


@dataclass(frozen=True)
class IsaReport:
    """Per instruction set (``PROBES``' flags): advertised, and whether it executed."""

    advertised: frozenset[str]
    executed: dict[str, bool | None]

    def usable(self, flag: str) -> bool:
        """Advertised and executed (where the probe could not run, advertised alone)."""
        ran = self.executed.get(flag)
        return flag in self.advertised and ran is not False

    def describe(self) -> str:
        return "; ".join(f"{name}: {how}" for name, how in self.facts().items())

    def facts(self) -> dict[str, str]:
        """Per instruction set (by name), advertised or not and whether it executed: the manifest's
        ``server.cpu_isa``, so a run folder shows that FP8 ran where AVX-512 or AMX executes."""
        out = {}
        for flag, (name, _) in PROBES.items():
            ran = self.executed.get(flag)
            if flag not in self.advertised:
                out[name] = "not advertised"
                continue
            out[name] = {
                True: "executes",
                False: "advertised but SIGILL when run",
                None: "advertised, not tried",
            }[ran]
        return out


def isa_report(flags: Iterable[str] | None = None) -> IsaReport:
    """Advertised flags, and each of ``PROBES`` tried where advertised (an unadvertised set is
    not run: the OS may not save its registers)."""
    advertised = frozenset(cpu_flags() if flags is None else flags)
    executed = {
        flag: (executes(code, amx=flag == "amx_tile") if flag in advertised else None)
        for flag, (_, code) in PROBES.items()
    }
    return IsaReport(advertised, executed)


def require_any(flags: Iterable[str], *, what: str, fix: str, report: IsaReport | None = None) -> IsaReport:
    """Refuse (exit 2) when none of ``flags`` is usable here, naming what is missing and why."""
    report = report or isa_report()
    wanted = list(flags)
    if not any(report.usable(f) for f in wanted):
        names = " or ".join(PROBES[f][0] for f in wanted)
        raise ConfigError(
            f"{what} needs {names}, and this CPU cannot execute {'either' if len(wanted) > 1 else 'it'} "
            f"({report.describe()})",
            fix=fix,
        )
    return report
