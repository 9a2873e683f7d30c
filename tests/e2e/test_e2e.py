"""End to end on the real llama-server with the real SmolLM2 model (marked e2e)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.engines.api import LaunchSlot
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def running(pid: int) -> bool:
    """A live process (a zombie waiting to be reaped has already stopped running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def records(run: Path, suite: str, arm: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines()]


def aa_arc_easy(data_dir: Path, run: Path) -> list[str]:
    """``compare`` of bf16 against itself on 30 arc_easy items, written to ``run``."""
    return ["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", "arc_easy", "--limit", "30",
            "--data-dir", str(data_dir), "--out", str(run)]  # fmt: skip


def wait_for_items(proc: subprocess.Popen[str] | subprocess.Popen[bytes], items: Path, n: int = 5) -> None:
    """Until ``items`` holds ``n`` records, the process ends, or 300 s pass (the caller checks which)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if items.exists() and len(items.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)


def test_aa_pair_passes_with_zero_flips(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "aa"
    code = main(aa_arc_easy(data_dir, run))
    assert code == 0
    verdict = json.loads((run / "verdict.json").read_text())
    row = next(r for r in verdict["suites"] if r["suite"] == "arc_easy" and r["primary"])
    assert verdict["verdict"] == "PASS" and row["n"] == 30 and row["n10"] == row["n01"] == 0
    base, cand = records(run, "arc_easy", "baseline"), records(run, "arc_easy", "candidate")
    assert len(base) == len(cand) == 30
    assert {r["item_id"]: r["prompt_hash"] for r in base} == {r["item_id"]: r["prompt_hash"] for r in cand}
    assert all(r["schema"] == 1 and r["error"] is None for r in base + cand)
    manifest = json.loads((run / "manifest.json").read_text())
    for arm in ("baseline", "candidate"):
        command = " ".join(manifest["arms"][arm]["command"])
        assert "--api-key ***" in command and "eg-" not in json.dumps(manifest)
        assert all(c["ok"] for c in manifest["arms"][arm]["preflight"])
    assert manifest["launch"]["baseline"]["model_sha256"] and manifest["git"] is not None


def test_generation_suite_runs_on_both_arms(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "gsm"
    code = main(
        [
            "compare",
            "--baseline",
            "bf16",
            "--candidate",
            "fp8kv",
            "--suites",
            "gsm8k",
            "--limit",
            "4",
            "--max-gen-tokens",
            "48",
            "--data-dir",
            str(data_dir),
            "--out",
            str(run),
        ]
    )
    assert code in (0, 1)
    verdict = json.loads((run / "verdict.json").read_text())
    assert [r["metric"] for r in verdict["suites"]] == [
        "exact_match,flexible-extract",
        "exact_match,strict-match",
    ]
    assert verdict["suites"][0]["n"] == 4
    manifest = json.loads((run / "manifest.json").read_text())
    assert ["-ctk", "q8_0"] in manifest["launch"]["candidate"]["args"]
    assert any("generation capped at 48" in n for n in verdict["notes"])


def test_killed_candidate_exits_3_keeps_records_and_leaves_no_server(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "kill"
    # 25 candidate items left when the test kills it after 5: a window of many seconds
    cmd = [sys.executable, "-m", "evalgate", *aa_arc_easy(data_dir, run)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    cand = run / "items" / "arc_easy.candidate.jsonl"
    wait_for_items(proc, cand)
    assert proc.poll() is None, proc.communicate()
    pid = json.loads((run / "manifest.json").read_text())["arms"]["candidate"]["pid"]
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, (out, err)
    assert "the candidate server died" in err and "SIGKILL" in err
    assert "log tail" in err and "--resume" in err
    for arm in ("baseline", "candidate"):  # every line still valid JSONL
        assert all(r["schema"] == 1 for r in records(run, "arc_easy", arm))
    assert len(records(run, "arc_easy", "baseline")) == 30
    arms = json.loads((run / "manifest.json").read_text())["arms"]
    for arm in ("baseline", "candidate"):  # both of this run's servers are gone (not zombies either)
        assert not running(arms[arm]["pid"])


def decision(run: Path) -> dict[str, object]:
    v = json.loads((run / "verdict.json").read_text())
    keys = ("suite", "metric", "n", "n11", "n10", "n01", "n00", "p_value", "p_adjusted", "status")
    return {
        "verdict": v["verdict"],
        "rows": [{k: r[k] for k in keys} for r in v["suites"]],
        "agreement": [
            {k: a[k] for k in ("suite", "n", "flips", "p_value", "status")} for a in v["agreement"]
        ],
    }


# --deterministic: one slot, one request at a time, no prompt cache. Without it llama.cpp's
# logprobs move by ~0.01 nats with the batch a request shares, and a near-tie can flip.
DETERMINISTIC = ["--baseline", "bf16", "--candidate", "fp8kv", "--suites", "arc_easy", "--limit", "10",
                 "--deterministic"]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """The launched, uninterrupted run of DETERMINISTIC, made once: the two tests below each run
    the same pair another way (killed then resumed; attached by URL) and compare verdicts with it."""
    root = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as mp:  # conftest's _isolate is per test; this runs before it
        mp.chdir(root)
        for var, value in (("HF_HOME", root / "hf"), ("HF_DATASETS_CACHE", root / "hf" / "datasets")):
            mp.setenv(var, str(value))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        code = main(["compare", *DETERMINISTIC, "--data-dir", str(data_dir), "--out", str(root / "run")])
    assert code in (0, 1)
    return root / "run"


def test_sigkill_evalgate_then_resume_equals_uninterrupted_run(
    data_dir: Path, tmp_path: Path, uninterrupted: Path
) -> None:
    flags = [*DETERMINISTIC, "--data-dir", str(data_dir)]
    whole = uninterrupted

    cut = tmp_path / "cut"
    cmd = [sys.executable, "-m", "evalgate", "compare", *flags, "--out", str(cut)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cand = cut / "items" / "arc_easy.candidate.jsonl"
    wait_for_items(proc, cand)
    proc.kill()  # SIGKILL: no cleanup code runs in evalgate
    proc.wait(timeout=30)
    server = json.loads((cut / "manifest.json").read_text())["arms"]["candidate"]["pid"]
    deadline = time.monotonic() + 30
    while running(server) and time.monotonic() < deadline:
        time.sleep(0.2)  # the server follows its parent (PR_SET_PDEATHSIG)
    assert not running(server)
    assert not (cut / "verdict.json").exists()
    done_before = len(cand.read_text().splitlines())
    assert 0 < done_before < 10

    assert main(["compare", "--resume", str(cut)]) in (0, 1)
    for arm in ("baseline", "candidate"):
        ids = [r["item_id"] for r in records(cut, "arc_easy", arm)]
        assert len(ids) == len(set(ids)) == 10
    assert decision(cut) == decision(whole)
    assert (cut / "verdict.json").read_bytes() == (whole / "verdict.json").read_bytes()


def test_sequential_stops_a_suite_without_flips_early(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "seq"
    flags = ["--baseline", "bf16", "--candidate", "bf16", "--suites", "arc_easy", "--limit", "40",
             "--data-dir", str(data_dir), "--sequential", "--chunk", "10", "--out", str(run)]  # fmt: skip
    assert main(["compare", *flags]) == 0
    m = json.loads((run / "manifest.json").read_text())
    seq = m["sequential"]["suites"]["arc_easy"]
    # no flips: the projection says E cannot reach 20 after the first look at 10 >= 20 % of 40
    assert (seq["decision"], seq["used"], seq["planned"]) == ("futile", 10, 40)
    for arm in ("baseline", "candidate"):
        assert len(records(run, "arc_easy", arm)) == 10
        assert not running(m["arms"][arm]["pid"])
    v = json.loads((run / "verdict.json").read_text())
    assert v["suites"][0]["sequential"]["decision"] == "futile" and v["suites"][0]["n"] == 10
    assert any(n.startswith("sequential: arc_easy 10/40 (futile") for n in v["notes"])
    # both servers were up at the same time, one busy at a time
    assert m["arms"]["baseline"]["pid"] != m["arms"]["candidate"]["pid"]
    assert main(["compare", "--resume", str(run)]) == 0  # decided: nothing runs, same verdict


def test_resume_refuses_changed_flags(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "r"
    assert main(["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", "arc_easy", "--limit", "3",
                 "--data-dir", str(data_dir), "--out", str(run)]) == 0  # fmt: skip
    assert main(["compare", "--resume", str(run), "--limit", "5"]) == 2
    assert "--limit 5 (the run used 3)" in capsys.readouterr().err
    assert main(["compare", "--resume", str(run)]) == 0  # nothing left to run: no server is started


def test_attached_servers_give_the_launched_verdict(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uninterrupted: Path
) -> None:
    """Two llama-servers started outside `compare`, passed by URL, give launched mode's verdict.json."""
    from evalgate.config import EvalgateConfig
    from evalgate.engines.llamacpp import LlamaCppEngine

    flags = [*DETERMINISTIC, "--data-dir", str(data_dir)]
    launched = uninterrupted

    cfg = EvalgateConfig()
    engine = LlamaCppEngine(cfg.llamacpp.model_copy(update={"deterministic": True}))
    base = engine.launch(engine.launch_spec(cfg.variant("bf16")), LaunchSlot("ext-base", tmp_path))
    cand = engine.launch(engine.launch_spec(cfg.variant("fp8kv")), LaunchSlot("ext-cand", tmp_path))
    with base as b, cand as c:
        monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", b.api_key)
        monkeypatch.setenv("EVALGATE_CANDIDATE_API_KEY", c.api_key)
        attached = tmp_path / "attached"
        code = main(["compare", *flags, "--out", str(attached),
                     "--baseline-url", b.base_url, "--candidate-url", c.base_url])  # fmt: skip
        assert code in (0, 1)
    m = json.loads((attached / "manifest.json").read_text())
    assert m["engine"] == "external" and m["arms"]["baseline"]["server"]["protocol"] == "llamacpp"
    assert b.api_key not in (attached / "manifest.json").read_text()
    got, want = (json.loads((run / "verdict.json").read_text()) for run in (attached, launched))
    # what ran is read from a launched server's log; an attached one shows only what /props says
    assert {k: v for k, v in got.items() if k != "what_ran"} == {
        k: v for k, v in want.items() if k != "what_ran"
    }
    assert len(got.get("what_ran", [])) < len(want["what_ran"])
