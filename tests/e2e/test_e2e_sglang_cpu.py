"""Real SGLang 0.5.23 on the CPU (marked sglang_cpu and e2e): the venv and the checkpoints that
`evalgate setup --sglang-cpu` makes (CI runs it before the tests), ``[sglang] device = "cpu"``.

No shim and no stub: every answer here is SGLang's, from its own PyTorch code, with evalgate's
import-only sgl_kernel stand-in (evalgate/engines/sglang/_standin.py) in its venv. The compare
tests print their wall time and flip counts (pytest -s shows them; docs/measurements.md quotes them).
The A/A and the int4 pair run at the same time (the ``pairs`` fixture): each wall time is that
run's beside the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalgate.cli import main
from evalgate.config import SGLangConfig
from evalgate.engines import ServerHandle
from evalgate.engines.api import LaunchSlot
from evalgate.engines.sglang import TESTED_VERSION, sglang_capacity
from evalgate.engines.sglang._cpu import SGLangCPUEngine, checkpoint_dir, default_root, venv_python
from evalgate.variants import parse_variant
from tests.conftest import needs_models


def have_sglang_cpu() -> bool:
    root = default_root()
    return venv_python(root).exists() and all(
        (checkpoint_dir(root, w) / "config.json").is_file() for w in ("bf16", "int4")
    )


needs_sglang_cpu = pytest.mark.skipif(
    not have_sglang_cpu(),
    reason="real SGLang on the CPU is not installed: run `evalgate setup --sglang-cpu` (.ci/run does)",
)
pytestmark = [pytest.mark.e2e, pytest.mark.sglang_cpu, needs_models, needs_sglang_cpu]

CONFIG = '[sglang]\ndevice = "cpu"\nready_timeout_s = 300\n'
# a checkpoint whose generation_config would change greedy chat answers if SGLang applied it
GENERATION_CONFIG = {"repetition_penalty": 1.8, "temperature": 0.9, "top_k": 3, "top_p": 0.5, "min_p": 0.2}


def compare(tmp_path: Path, data_dir: Path, name: str, *flags: str) -> tuple[int, Path, float]:
    config = tmp_path / "evalgate.toml"
    config.write_text(CONFIG)
    run = tmp_path / name
    start = time.monotonic()
    code = main(["compare", "--engine", "sglang", "--config", str(config), *flags,
                 "--data-dir", str(data_dir), "--out", str(run), "--skip-kernel-check"])  # fmt: skip
    return code, run, time.monotonic() - start


def summary(run: Path, seconds: float) -> str:
    v = json.loads((run / "verdict.json").read_text())
    rows = [f"{r['suite']} {r['flips']}/{r['n']} flips" for r in v["agreement"]]
    return f"{run.name}: {v['verdict']} in {seconds:.0f} s; " + ", ".join(rows)


# The pairs CI runs: one bf16 arm against another, and against the Q4_0 weights.
LIMIT = 8  # items per suite: CI's budget (docs/measurements.md has the --limit 20 run)
# GSM8K's generations are most of a pair's time on a CPU: the A/A pair runs them (capped), the int4
# pair, run beside it on the other core, the two log-likelihood suites
PAIRS = {
    "aa": (
        "--baseline",
        "bf16",
        "--candidate",
        "bf16",
        "--suites",
        "arc_easy,gsm8k,drift",
        "--max-gen-tokens",
        "32",  # a generation on both arms, compared token for token; the answers' quality is not the point
    ),
    "int4": ("--baseline", "bf16", "--candidate", "int4", "--suites", "arc_easy,drift"),
}
PAIR_FLAGS = ("--limit", str(LIMIT), "--skip-kernel-check", "--suite-opt", "drift.decode_tokens=16")
# 16 greedy decode steps per drift document: SGLang's CPU decode costs ~170 ms a step (docs/measurements.md)
Pair = tuple[int, Path, float, str]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Pair]:
    """Both pairs at once, each `evalgate compare` in a process of its own: an SGLang arm computes
    on one thread (``cpu_threads``) and a run keeps one arm busy at a time, so one run leaves one
    of two cores idle, and two side by side take about as long as the longer alone (it saves CI
    about 8 minutes). Each pair's exit code, run folder, wall seconds and output."""
    root = tmp_path_factory.mktemp("pairs")
    config = root / "evalgate.toml"
    config.write_text(CONFIG)
    drop = ("GITHUB_", "EVALGATE_BASELINE_", "EVALGATE_CANDIDATE_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    procs = {}
    for name, arms in PAIRS.items():
        hf = root / f"hf-{name}"  # what conftest's _isolate does per test, a cache for each process
        env = {**base, "HF_HOME": str(hf), "HF_DATASETS_CACHE": str(hf / "datasets"), "HF_HUB_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1"}  # fmt: skip
        cmd = [sys.executable, "-m", "evalgate", "compare", "--engine", "sglang", "--config", str(config), *arms,
               *PAIR_FLAGS, "--data-dir", str(data_dir), "--out", str(root / name)]  # fmt: skip
        with (root / f"{name}.out").open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
        procs[name] = (proc, time.monotonic())
    results = {}
    try:
        for name, (proc, start) in procs.items():
            code = proc.wait(timeout=3600)
            results[name] = (code, root / name, time.monotonic() - start, (root / f"{name}.out").read_text())
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()  # its servers follow it (PR_SET_PDEATHSIG)
                proc.wait()
    return results


def test_aa_bf16_passes_on_real_sglang(pairs: dict[str, Pair]) -> None:
    """The acceptance command of #18: bf16 against bf16 on real SGLang 0.5.23, arc_easy + gsm8k."""
    code, run, seconds, output = pairs["aa"]
    print(summary(run, seconds))
    assert code == 0, output[-3000:]
    m = json.loads((run / "manifest.json").read_text())
    assert m["engine"] == "sglang" and m["engine_version"] == TESTED_VERSION
    for arm in ("baseline", "candidate"):
        args = {k: v for k, v in m["launch"][arm]["args"]}
        assert args["--device"] == "cpu" and args["--attention-backend"] == "torch_native"
        assert ["SGLANG_USE_CPU_ENGINE", "1"] in m["launch"][arm]["env"]
        for suite in ("arc_easy", "gsm8k"):
            lines = (run / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines()
            assert len(lines) == LIMIT and all(json.loads(line)["error"] is None for line in lines)
    v = json.loads((run / "verdict.json").read_text())
    assert v["verdict"] == "PASS"
    # #30, #42: the A/A pair's drift on the real server, within the budget on every row (a row of
    # documents identical on both arms is UNDERPOWERED, with no bound: nothing differs to size it)
    rows = [r for r in v["drift"][0]["rows"] if r["pair"] == "candidate" and r["measure"] == "kld"]
    assert {r["path"] for r in rows} == {"prefill", "decode"}, rows
    assert all(r["status"] in ("pass", "underpowered") and r["estimate"] < 1e-3 for r in rows), rows
    assert drift_row(v, "kld")["n"] == LIMIT
    # #53: past the first parting, each arm's whole greedy text read on the other (prompt logprobs),
    # its length, and each arm's decode against its own prefill re-read; none blocks an A/A pair
    past = {r["measure"]: r for r in v["drift"][0]["rows"] if r["pair"] == "candidate"}
    assert {"cross", "length", "consistency", "parted"} <= set(past), sorted(past)
    assert all(past[m]["status"] in ("pass", "underpowered") for m in ("cross", "length", "consistency")), (
        past
    )


def drift_row(verdict: dict, measure: str) -> dict:
    """The candidate's ``measure`` row of the drift suite in a verdict.json."""
    (section,) = verdict["drift"]
    return next(r for r in section["rows"] if r["measure"] == measure and r["pair"] == "candidate")


def test_int4_weights_candidate_runs_on_real_sglang(pairs: dict[str, Pair]) -> None:
    """bf16 against the Q4_0 weights (dequantized; SGLang has no weight-quantized CPU kernel
    without AMX): every item scored on both arms, a verdict either way."""
    code, run, seconds, output = pairs["int4"]
    print(summary(run, seconds))
    assert code in (0, 1), output[-3000:]
    m = json.loads((run / "manifest.json").read_text())
    assert m["launch"]["candidate"]["model"] == str(checkpoint_dir(default_root(), "int4"))
    assert m["launch"]["baseline"]["model"] == str(checkpoint_dir(default_root(), "bf16"))
    for arm in ("baseline", "candidate"):
        for suite in ("arc_easy", "drift"):
            latest = {}  # a drift record with a read appended supersedes the first (run/reads.py)
            for line in (run / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines():
                latest[json.loads(line)["item_id"]] = json.loads(line)
            assert len(latest) == LIMIT and all(r["error"] is None for r in latest.values())
    v = json.loads((run / "verdict.json").read_text())
    kld, aa = drift_row(v, "kld"), drift_row(json.loads((pairs["aa"][1] / "verdict.json").read_text()), "kld")
    print(
        f"drift on real SGLang: Q4_0 weights KL {kld['estimate']:.4g} (A/A {aa['estimate']:.4g}), {kld['status']}"
    )
    assert kld["n"] == LIMIT and kld["estimate"] > max(aa["estimate"], 0.0) and kld["upper"] is not None


def test_fp8_kv_is_refused_before_launch(tmp_path: Path, data_dir: Path) -> None:
    code, _, seconds = compare(tmp_path, data_dir, "fp8kv", "--baseline", "bf16", "--candidate", "fp8kv",
                               "--suites", "arc_easy", "--limit", "2")  # fmt: skip
    assert code == 2 and seconds < 30


# -- the protocol against the real server ------------------------------------------------------


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SGLangCPUEngine, ServerHandle, ServerHandle]]:
    """Two real servers with the same settings, on a copy of the bf16 checkpoint that carries a
    generation_config.json evalgate must not let SGLang apply (fix 3)."""
    model = tmp_path_factory.mktemp("model") / "SmolLM2-genconfig"
    shutil.copytree(checkpoint_dir(default_root(), "bf16"), model)
    (model / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    engine = SGLangCPUEngine(SGLangConfig(device="cpu", model_path=str(model), ready_timeout_s=300))
    spec = engine.launch_spec(parse_variant("bf16"))
    logs = tmp_path_factory.mktemp("logs")
    with (
        engine.launch(spec, LaunchSlot("one", logs)) as one,
        engine.launch(spec, LaunchSlot("two", logs)) as two,
    ):
        yield engine, one, two


def headers(handle: ServerHandle) -> dict[str, str]:
    return {"Authorization": f"Bearer {handle.api_key}"}


def test_capacity_from_the_real_log_and_server_info(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
) -> None:
    """Fix 8: 0.5.23's own pool line ('KV Cache is allocated. dtype: ..., #tokens: N') is read."""
    engine, one, _ = servers
    log = one.log_path.read_text(errors="replace")
    # the CPU arms compute in float32 with the KV cache at "auto" (engines/sglang/_cpu.py)
    assert "KV Cache is allocated. dtype: torch.float32, #tokens: 16384" in log
    from_log = sglang_capacity(log)
    assert from_log and from_log["kv_tokens"] == 16384 and from_log["kv_types"] == "float32"
    cap = engine.capacity(one)
    assert cap and cap["kv_tokens"] == from_log["kv_tokens"] and cap.get("kv_types") == "float32"


def test_sampling_defaults_are_openai_not_the_checkpoints(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
) -> None:
    """Fix 3: with --sampling-defaults openai the checkpoint's generation_config is not applied."""
    _, one, _ = servers
    info = httpx.get(f"{one.base_url}/server_info", headers=headers(one), timeout=30).json()
    assert info["sampling_defaults"] == "openai"
    log = one.log_path.read_text(errors="replace")
    assert "Using default chat sampling params from model generation config" not in log


def test_flush_waits_for_a_running_generation(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
) -> None:
    """Fix 6: a flush sent while a generation runs is answered once the server is idle (0.5.23's
    ``?timeout``), and an idle server flushes at once."""
    engine, one, _ = servers

    def long_generation() -> None:
        body = {
            "text": "Count from one to one hundred:",
            "sampling_params": {"max_new_tokens": 96, "temperature": 0},
        }
        httpx.post(f"{one.base_url}/generate", json=body, headers=headers(one), timeout=300)

    async def flush_twice() -> list[Any]:
        scorer = engine.scorer(one)
        try:
            busy = threading.Thread(target=long_generation)
            busy.start()
            await asyncio.sleep(1.0)
            first = await scorer.flush_cache()
            busy.join()
            return [first, await scorer.flush_cache()]
        finally:
            await scorer.aclose()

    assert asyncio.run(flush_twice()) == ["flushed", "flushed"]


def test_attach_to_two_real_servers_passes_the_settings_check(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fix 1: two servers launched alike differ in startup_time and launch_command (port, key),
    which are per launch, not settings: attach mode compares them instead of refusing."""
    _, one, two = servers
    info = [httpx.get(f"{h.base_url}/server_info", headers=headers(h), timeout=30).json() for h in (one, two)]
    assert all("startup_time" in i and "launch_command" in i for i in info)
    assert info[0]["launch_command"] != info[1]["launch_command"]
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", one.api_key)
    monkeypatch.setenv("EVALGATE_CANDIDATE_API_KEY", two.api_key)
    run = tmp_path / "attached"
    code = main(["compare", "--baseline-url", one.base_url, "--candidate-url", two.base_url,
                 "--suites", "arc_easy", "--limit", "6", "--data-dir", str(data_dir), "--out", str(run),
                 "--skip-kernel-check"])  # fmt: skip
    assert code == 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["arms"]["baseline"]["server"]["protocol"] == "sglang"
    assert one.api_key not in (run / "manifest.json").read_text()


def test_token_distributions_on_real_sglang(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
) -> None:
    """The drift suite's request on 0.5.23: one forced position per token after ``start``, each
    with 20 alternatives from the model's own logits, adding up to loglikelihood's score."""
    engine, one, _ = servers
    context, text = "The capital of France is", " Paris.\nIt is a large city on the Seine."

    async def go() -> tuple[list[int], Any, float]:
        scorer = engine.scorer(one)
        try:
            ctx, cont = await scorer.split_tokens(context, text)
            positions = await scorer.token_distributions(ctx + cont, start=len(ctx), top_k=20)
            return cont, positions, (await scorer.loglikelihood(context, text))[0]
        finally:
            await scorer.aclose()

    forced, positions, loglik = asyncio.run(go())
    assert len(positions) == len(forced) > 5
    for lp, top in positions:
        assert len(top) == 20 and all(isinstance(t, int) and -1e9 < v <= 0 for t, v in top) and lp <= 0
    assert any(top[0][0] != tok and lp < top[0][1] for tok, (lp, top) in zip(forced, positions, strict=True))
    assert sum(lp for lp, _ in positions) == pytest.approx(loglik, abs=1e-3)


def test_cache_probe_isolates_salted_tenants_and_blocks_without_salts(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
) -> None:
    """#33 on 0.5.23: with salts CROSS reads 0 cached tokens and the positive control is
    significant (PASS); with the salts omitted the probe BLOCKs. Prints both summary lines.

    A timing bound on a busy 2-core machine can be too wide at a few probes (UNDERPOWERED, exit
    3: "rerun with about N probes"); the test then does what a user would, once, with the
    number the probe names. A BLOCK, an ERROR or a second UNDERPOWERED fails it."""
    from evalgate.probe import ProbeSettings, run_cache_probe, summary_line

    engine, one, _ = servers

    async def probe(salted: bool, probes: int) -> dict[str, Any]:
        scorer = engine.scorer(one)
        try:
            # alpha 0.01: a salted server's CROSS must not look faster than COLD by chance (at 0.05 one
            # run in twenty would; one on a busy machine did, 1.09x at p = 0.043, with 0 tokens cached)
            return await run_cache_probe(scorer, ProbeSettings(probes=probes, salted=salted, alpha=0.01))
        finally:
            await scorer.aclose()

    salted = asyncio.run(probe(True, 12))
    print(summary_line(salted))
    if salted["verdict"] == "UNDERPOWERED" and salted["timing"]["probes_needed"]:
        # CI on stop 39: 8 probes, CROSS 0.985x, upper 1.223x against a margin of 1.201x
        salted = asyncio.run(probe(True, min(2 * salted["timing"]["probes_needed"], 40)))
        print(summary_line(salted))
    assert salted["verdict"] == "PASS", salted["reasons"]
    assert salted["oracle"]["cross_cached_max"] == 0 and salted["timing"]["gap_p"] < 0.05
    assert salted["oracle"]["same_probes_below_prefix"] == 0 and salted["flush"] == ["flushed"]
    shared = asyncio.run(probe(False, 8))
    print(summary_line(shared))
    assert shared["verdict"] == "BLOCK" and shared["oracle"]["cross_probes_with_cached_tokens"] == 8


def test_warm_and_cold_answers_agree_on_real_sglang(
    servers: tuple[SGLangCPUEngine, ServerHandle, ServerHandle],
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#33: the same items answered cold (a salt each) and warm (one shared salt, read from the
    radix cache) on one real server: the warm requests do read the cache, the cold ones do not,
    and the answers are the same, or the probe says which flipped and why it blocks."""
    _, one, _ = servers
    monkeypatch.setenv("EVALGATE_API_KEY", one.api_key)
    out = tmp_path / "warm-cold"
    code = main(["probe", "warm-cold", "--url", one.base_url, "--limit", "2", "--data-dir", str(data_dir),
                 "--out", str(out)])  # fmt: skip
    report = json.loads((out / "probe.json").read_text())
    print(
        report["verdict"], f"{report['flips']}/{report['n']} flips", report["conditions"], report["reasons"]
    )
    assert code in (0, 1), report
    warm, cold = report["conditions"]["warm"], report["conditions"]["cold"]
    assert warm["cached_tokens_min"] > 0 and cold["cached_tokens_max"] == 0, report
    assert report["n"] == 4 and (code == 0) == (report["verdict"] == "PASS")
    if code == 1:  # a flip is named, never a silent difference
        assert report["flips"] and any(i["flip"] for i in report["items"]) and report["reasons"], report
