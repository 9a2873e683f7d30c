"""The CPU engine's wait policy chosen from the machine's load (#15): measured once, same on both arms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalgate.config import LlamaCppConfig
from evalgate.engines.llamacpp import _host
from evalgate.engines.llamacpp._engine import LlamaCppEngine
from evalgate.variants import Variant

STAT = """cpu  100 5 50 1000 20 1 2 7 0 0
cpu0 50 2 25 500 10 0 1 3 0 0
intr 12345
"""


def test_cpu_times_counts_steal_as_busy_and_iowait_as_idle() -> None:
    busy, total = _host._cpu_times(STAT)
    assert busy == 100 + 5 + 50 + 1 + 2 + 7
    assert total == busy + 1000 + 20


def test_unreadable_stat_means_unknown_load_and_openmp_default(tmp_path: Path) -> None:
    load = _host.choose_wait_policy(sample_s=0.0, stat=tmp_path / "missing")
    assert load.busy_cores is None and load.wait_policy == "default"
    assert "unknown" in load.reason


@pytest.mark.parametrize(
    ("busy", "policy"), [(0.0, "default"), (0.49, "default"), (0.5, "passive"), (1.7, "passive")]
)
def test_threshold_picks_the_policy(monkeypatch: pytest.MonkeyPatch, busy: float, policy: str) -> None:
    monkeypatch.setattr(_host, "busy_cores", lambda **_: busy)
    load = _host.choose_wait_policy()
    assert load.wait_policy == policy
    assert f"{busy:.2f}" in load.reason


def test_a_spinning_process_reads_as_busy() -> None:
    """The real /proc/stat with one CPU-bound process beside it: at least half a core is busy."""
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat on this platform")
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<5: pass"])
    try:
        busy = _host.busy_cores(sample_s=1.0)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and busy >= _host.BUSY_THRESHOLD


def _envs(engine: LlamaCppEngine) -> list[dict[str, str]]:
    specs = [
        engine.launch_spec(Variant(name=n, kv=kv, model="/m.gguf")) for n, kv in (("b", "bf16"), ("c", "fp8"))
    ]
    return [dict(s.env) for s in specs]


def test_auto_decides_once_for_both_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(**_: object) -> _host.HostLoad:
        calls.append(1)
        return _host.HostLoad(2, 1.0, 1.0, "passive", "busy")

    monkeypatch.setattr("evalgate.engines.llamacpp._engine.choose_wait_policy", fake)
    engine = LlamaCppEngine(LlamaCppConfig())
    host = engine.settle_host()
    assert host == {"wait_policy_probe": {"cpus": 2, "busy_cores": 1.0, "sample_s": 1.0,
                                          "wait_policy": "passive", "reason": "busy"}}  # fmt: skip
    base, cand = _envs(engine)
    assert base == cand == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert len(calls) == 1


def test_resume_keeps_the_original_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evalgate.engines.llamacpp._engine.choose_wait_policy", pytest.fail)
    engine = LlamaCppEngine(LlamaCppConfig())
    engine.settle_host(previous_env=[("OMP_WAIT_POLICY", "PASSIVE")])
    assert _envs(engine)[1] == {"OMP_WAIT_POLICY": "PASSIVE"}
    quiet = LlamaCppEngine(LlamaCppConfig())
    assert quiet.settle_host(previous_env=[])["wait_policy_probe"]["wait_policy"] == "default"
    assert _envs(quiet) == [{}, {}]


def test_a_fixed_policy_measures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evalgate.engines.llamacpp._engine.choose_wait_policy", pytest.fail)
    engine = LlamaCppEngine(LlamaCppConfig(wait_policy="passive"))
    assert engine.settle_host() is None
    assert _envs(engine)[0] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert _envs(LlamaCppEngine(LlamaCppConfig(wait_policy="default"))) == [{}, {}]
