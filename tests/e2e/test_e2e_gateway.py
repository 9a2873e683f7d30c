"""Arms of many workers behind the real smg in front of real llama-servers (marked e2e).

Launched (``[llamacpp] workers = 2``) and attached (two gateway URLs) pairs score every item as
one llama-server does under --deterministic, record for record; a gateway whose two workers differ
in KV type is refused with exit 2 naming them, which no setting llama-server reports could show.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.api import LaunchSlot
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]

SUITES = ["--suites", "arc_easy,drift", "--limit", "6", "--deterministic"]
THREADS = "[llamacpp]\nthreads = 1\n"  # every server alike: the single one and each worker


def _smg() -> Path:
    beside = Path(sys.executable).with_name("smg")
    found = beside if beside.is_file() else shutil.which("smg")
    if not found:
        pytest.skip("smg is not installed (pip install 'evalgate[gateway]'; the dev extra has it)")
    return Path(found)


def records(run: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for path in sorted((run / "items").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            out[(r["arm"], r["suite"], r["item_id"])] = {"metrics": r["metrics"], "response": r["response"]}
    return out


@pytest.fixture(scope="module")
def single(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Any]:
    """The reference: one llama-server per arm, --deterministic."""
    tmp = tmp_path_factory.mktemp("single")
    (tmp / "evalgate.toml").write_text(THREADS, encoding="utf-8")
    args = ["compare", "--config", str(tmp / "evalgate.toml"), "--baseline", "bf16", "--candidate", "fp8kv"]
    code = main([*args, *SUITES, "--data-dir", str(data_dir), "--out", str(tmp / "run")])
    assert code == 0
    return records(tmp / "run")


def test_launched_workers_behind_smg_score_like_one_server(
    single: dict[tuple[str, str, str], Any], data_dir: Path, tmp_path: Path
) -> None:
    _smg()
    config = tmp_path / "evalgate.toml"
    config.write_text(THREADS + "workers = 2\n", encoding="utf-8")
    args = ["compare", "--config", str(config), "--baseline", "bf16", "--candidate", "fp8kv"]
    assert main([*args, *SUITES, "--data-dir", str(data_dir), "--out", str(tmp_path / "run")]) == 0
    assert records(tmp_path / "run") == single  # 24 records: metrics and responses alike

    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    for arm in ("baseline", "candidate"):
        gateway = manifest["arms"][arm]["server"]["gateway"]
        workers = [w["url"] for w in gateway["workers"]]
        assert len(workers) == 2 and gateway["policy"] == "consistent_hashing"
        assert all(gateway["probe"][u]["identical"] for u in workers)
        assert set(gateway["routed"]) == set(workers), gateway["routed"]  # both served, smg said which
        assert {f"{arm}-gateway.log", f"{arm}-w0.log", f"{arm}-w1.log"} <= {
            p.name for p in (tmp_path / "run" / "logs").iterdir()
        }
    assert "--disable-retries" in manifest["arms"]["baseline"]["command"]
    served: dict[str, set[str]] = {"baseline": set(), "candidate": set()}
    for path in (tmp_path / "run" / "items").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            assert len(r["extra"]["workers"]) == 1, r["extra"]  # one key, one worker per item
            served[r["arm"]] |= set(r["extra"]["workers"])
    for arm, urls in served.items():
        assert urls <= {w["url"] for w in manifest["arms"][arm]["server"]["gateway"]["workers"]}


@contextlib.contextmanager
def gateway_over(workers: list[Any], name: str, key: str, tmp: Path) -> Iterator[str]:
    from evalgate.engines.gateway import launch_gateway

    handles = {w.base_url: w for w in workers}
    program = _smg()
    with launch_gateway(
        program, handles, name=name, log_dir=tmp, api_key=key, policy="consistent_hashing", timeout_s=60
    ) as (handle, _):
        yield handle.base_url


def test_attached_gateways_score_like_one_server_and_a_mixed_arm_is_refused(
    single: dict[tuple[str, str, str], Any],
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Servers someone else started: two bf16 and two q8_0-KV llama-servers with evalgate's own
    deterministic settings, one smg in front of each pair, and one smg in front of a bf16 and a
    q8_0-KV worker: the mixed one passes every setting check and fails the probe."""
    from evalgate.config import LlamaCppConfig
    from evalgate.engines._launcher import WorkerSlot
    from evalgate.engines.llamacpp import LlamaCppEngine
    from evalgate.variants import parse_variant

    key = "gateway-e2e-key"
    engine = LlamaCppEngine(LlamaCppConfig(threads=1, deterministic=True, wait_policy="default"))
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", key)
    monkeypatch.setenv("EVALGATE_CANDIDATE_API_KEY", key)
    with contextlib.ExitStack() as stack:
        up: dict[str, list[Any]] = {}
        for first, variant in ((0, "bf16"), (2, "fp8kv")):  # one served name: only the KV type differs
            spec = engine.launch_spec(parse_variant(variant))
            up[variant] = [
                stack.enter_context(
                    engine.launch(spec, LaunchSlot("ext", tmp_path, worker=WorkerSlot(i, 4, key)))
                )
                for i in (first, first + 1)
            ]
        base = stack.enter_context(gateway_over(up["bf16"], "ext-bf16", key, tmp_path))
        cand = stack.enter_context(gateway_over(up["fp8kv"], "ext-fp8kv", key, tmp_path))
        mixed = stack.enter_context(gateway_over([up["bf16"][0], up["fp8kv"][1]], "ext-mixed", key, tmp_path))

        args = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", *SUITES, "--data-dir", str(data_dir)]
        code = main([*args, "--baseline-url", base, "--candidate-url", cand, "--out", str(tmp_path / "run")])
        assert code == 0
        assert records(tmp_path / "run") == single
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
        listed = [w["url"] for w in manifest["arms"]["candidate"]["server"]["gateway"]["workers"]]
        assert sorted(listed) == sorted(w.base_url for w in up["fp8kv"])

        capsys.readouterr()
        # --same-server-ok: the mixed gateway shares a worker with each of the others on purpose
        mixed_args = ["--baseline-url", mixed, "--candidate-url", cand, "--same-server-ok"]
        code = main([*args, *mixed_args, "--out", str(tmp_path / "mixed")])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "mixes workers" in err and "mean KL" in err, err
        odd = {up["bf16"][0].base_url, up["fp8kv"][1].base_url}
        assert any(u in err for u in odd), err
        assert not list((tmp_path / "mixed").glob("items/*.jsonl"))  # refused before any item
