"""Test isolation: every output and dataset cache goes under tmp; nothing leaves loopback.

The model cache (EVALGATE_CACHE, prepared once by `evalgate setup` in .ci/run) is shared and
read-only in spirit: tests never download, they skip the end-to-end tier if it is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evalgate.engines import registered_engine
from evalgate.engines.fake import FakeEngine
from evalgate.store.records import Record

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = (REPO / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "arc").exists():
        pytest.skip(f"benchmark data not found at {DATA_DIR}")
    return DATA_DIR


def _strict(constant: str) -> float:
    raise AssertionError(f"a record was written with a bare {constant} (records are strict JSON, #31)")


@pytest.fixture(autouse=True)
def _records_are_strict_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record any test makes evalgate write is strict JSON: no bare NaN or Infinity, which
    jq, JavaScript and most data tools reject (a non-finite value is null with its reason)."""
    to_json = Record.to_json

    def checked(self: Record) -> str:
        line = to_json(self)
        json.loads(line, parse_constant=_strict)
        return line

    monkeypatch.setattr(Record, "to_json", checked)


@pytest.fixture(scope="session")
def _hf_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf")


@pytest.fixture(autouse=True)
def _isolate(tmp_path: Path, _hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(_hf_cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(_hf_cache / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for var in ("GITHUB_ACTIONS", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    for arm in ("BASELINE", "CANDIDATE"):  # a key in the developer's shell is not the test's
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)


@pytest.fixture(autouse=True)
def _quiet_host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests see a quiet machine: the CPU engine's ``wait_policy = "auto"`` would otherwise
    sleep 1 s sampling /proc/stat and launch flags would depend on what else CI runs. The e2e
    tests keep the real measurement (tests/engines/test_host_load.py tests it on its own)."""
    if request.node.get_closest_marker("e2e"):
        return
    from evalgate.engines.llamacpp import _host

    quiet = _host.HostLoad(cpus=2, busy_cores=0.0, sample_s=0.0, wait_policy="default", reason="test: quiet")
    monkeypatch.setattr("evalgate.engines.llamacpp._engine.choose_wait_policy", lambda **_: quiet)


def have_llama_server() -> bool:
    try:
        from evalgate.engines.llamacpp import find_binary

        find_binary()
        return True
    except Exception:
        return False


def have_models() -> bool:
    root = Path(os.environ.get("EVALGATE_CACHE") or Path.home() / ".cache" / "evalgate")
    return (root / "source" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


needs_server = pytest.mark.skipif(
    not have_llama_server(), reason="llama-server not installed (pip install '.[cpu]')"
)
needs_models = pytest.mark.skipif(
    not (have_llama_server() and have_models()), reason="run `evalgate setup` first (CI does)"
)


@pytest.fixture
def use() -> Iterator[Callable[[FakeEngine], FakeEngine]]:
    """Make ``--engine fake`` build this engine (its script, its record of launches and requests),
    registered by name for this test only: unregistered at teardown, and again before a second
    ``use`` in the same test registers another."""
    with contextlib.ExitStack() as scope:

        def install(engine: FakeEngine) -> FakeEngine:
            scope.close()
            scope.enter_context(registered_engine("fake", lambda cfg: engine))
            return engine

        yield install
