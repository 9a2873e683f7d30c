"""compare --baseline-samples/--candidate-samples: lm-eval runs gated with no server (#22).

The fixtures in tests/fixtures/lmeval/ are real lm-eval 0.4.13 ``--log_samples`` output, made by
``scripts/lmeval_samples.py`` with lm-eval's own CLI against the CPU engine (SmolLM2-135M, F16 and
Q4_0 weights; arc_easy and gsm8k, the first 30 documents), with the long few-shot prompts in
``arguments`` cut short (the import never reads them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import evalgate
from evalgate.cli import main
from evalgate.report.frames import ITEM_COLUMNS, PAIR_COLUMNS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"
BASE, CAND = FIXTURES / "bf16", FIXTURES / "int4"
EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example"


def _samples(folder: Path, task: str) -> list[dict]:
    (path,) = folder.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _compare(tmp_path: Path, base: Path, cand: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    code = main(
        [
            "compare",
            "--baseline-samples",
            str(base),
            "--candidate-samples",
            str(cand),
            "--out",
            str(out),
            *extra,
        ]
    )
    return code, out


def test_counts_match_a_count_made_from_the_sample_files(tmp_path: Path) -> None:
    code, out = _compare(tmp_path, BASE, CAND)
    verdict = json.loads((out / "verdict.json").read_text())
    row = next(r for r in verdict["suites"] if r["suite"] == "arc_easy" and r["metric"] == "acc")
    b = {s["doc_id"]: s["acc"] for s in _samples(BASE, "arc_easy")}
    c = {s["doc_id"]: s["acc"] for s in _samples(CAND, "arc_easy")}
    assert row["n"] == len(b) == 30
    assert row["n10"] == sum(b[d] == 1 and c[d] == 0 for d in b)
    assert row["n01"] == sum(b[d] == 0 and c[d] == 1 for d in b)
    assert code == {"PASS": 0, "BLOCK": 1}[verdict["verdict"]]
    gsm = next(r for r in verdict["suites"] if r["suite"] == "gsm8k" and r["primary"])
    assert gsm["metric"] == "exact_match,flexible-extract"  # evalgate's primary, from lm-eval's filter
    agreement = next(a for a in verdict["agreement"] if a["suite"] == "arc_easy")
    assert agreement["kl_mean"] is not None and agreement["top1_agree"] is not None  # from resps
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"] == "lm-eval samples"
    assert manifest["imported"]["baseline"]["lm_eval_version"] == "0.4.13"
    assert manifest["suites"]["arc_easy"]["item_ids"][0].startswith("Mercury_")  # the live suite's ids
    assert "lm-eval" in (out / "report.html").read_text()


def test_the_same_run_on_both_arms_passes_with_no_flips(tmp_path: Path) -> None:
    code, out = _compare(tmp_path, BASE, BASE, "--same-server-ok")  # an A/A: refused without it (#31)
    verdict = json.loads((out / "verdict.json").read_text())
    assert code == 0 and verdict["verdict"] == "PASS"
    assert all(a["flips"] == 0 for a in verdict["agreement"])


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(CAND, dst)
    return dst


def _rewrite(folder: Path, task: str, change) -> None:  # type: ignore[no-untyped-def]
    (path,) = folder.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r for r in (change(r) for r in rows) if r is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_different_prompt_is_refused_naming_the_task_and_doc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = _copy(tmp_path, "fewshot")

    def other_prompt(r: dict) -> dict:
        if r["doc_id"] == 7:  # e.g. another num_fewshot: lm-eval's prompt_hash changes
            r["prompt_hash"] = "0" * 64
        return r

    _rewrite(cand, "arc_easy", other_prompt)
    code, out = _compare(tmp_path, BASE, cand)
    err = capsys.readouterr().err
    assert code == 2
    assert "arc_easy" in err and "doc_id 7" in err and "different prompt" in err
    assert not (out / "verdict.json").exists()


def test_different_documents_or_tasks_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fewer = _copy(tmp_path, "fewer")
    _rewrite(fewer, "arc_easy", lambda r: r if r["doc_id"] < 20 else None)
    assert _compare(tmp_path, BASE, fewer)[0] == 2
    assert "different documents" in capsys.readouterr().err
    no_gsm = _copy(tmp_path, "no_gsm")
    for p in no_gsm.rglob("samples_gsm8k_*.jsonl"):
        p.unlink()
    assert _compare(tmp_path, BASE, no_gsm)[0] == 2
    assert "gsm8k on one arm only" in capsys.readouterr().err
    code, out = _compare(tmp_path, BASE, no_gsm, "--suites", "arc_easy")  # the shared task alone
    assert code in (0, 1) and list(json.loads((out / "manifest.json").read_text())["suites"]) == ["arc_easy"]


def test_a_key_in_model_args_reaches_no_file(tmp_path: Path) -> None:
    cand = _copy(tmp_path, "keyed")
    (results,) = cand.rglob("results_*.json")
    doc = json.loads(results.read_text())
    doc["config"]["model_args"] = "base_url=http://u:pw-secret-1@127.0.0.1:8080,api_key=sk-live-secret-2"
    results.write_text(json.dumps(doc))
    _, out = _compare(tmp_path, BASE, cand)
    for f in out.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "secret-1" not in text and "secret-2" not in text, f


def test_an_unknown_task_keeps_its_own_name_and_a_graded_metric(tmp_path: Path) -> None:
    """A task evalgate has no suite for is taken as it is; a metric in (0, 1) is graded."""
    folders = []
    for arm, shift in (("b", 0.0), ("c", -0.3)):
        dst = tmp_path / arm
        shutil.copytree(BASE, dst)
        for p in dst.rglob("samples_gsm8k_*.jsonl"):
            p.unlink()
        (src,) = dst.rglob("samples_arc_easy_*.jsonl")
        rows = [json.loads(line) for line in src.read_text().splitlines()]
        for r in rows:
            r["metrics"] = ["f1"]
            r["f1"] = round(min(1.0, max(0.0, 0.8 + shift + (r["doc_id"] % 5) / 50)), 3)
        src.with_name(src.name.replace("arc_easy", "my_task")).write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
        src.unlink()
        folders.append(dst)
    code, out = _compare(tmp_path, *folders)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["suites"]["my_task"]["metrics"] == ["f1"]
    assert manifest["suites"]["my_task"]["metric_kind"] == "continuous"
    row = json.loads((out / "verdict.json").read_text())["suites"][0]
    assert row["suite"] == "my_task" and row["delta"] == pytest.approx(-0.3, abs=1e-6)
    assert code == 1  # every item lost 0.3: a graded drop blocks


def test_load_run_pairs_on_the_committed_example() -> None:
    run = evalgate.load_run(EXAMPLE)
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    pairs = run.pairs()
    assert list(pairs.columns) == list(PAIR_COLUMNS)
    assert len(pairs) == sum(s["n"] for s in manifest["suites"].values())
    assert set(pairs["direction"]) <= {"same", "regression", "improvement", "drift"}
    scored = pairs[pairs["direction"] != "drift"]  # drift documents pair log-likelihoods, not scores
    assert (scored["flipped"] == (scored["baseline"] != scored["candidate"])).all()
    items = run.items()
    assert list(items.columns[: len(ITEM_COLUMNS)]) == list(ITEM_COLUMNS)
    assert len(items) == 2 * len(pairs)
    verdict = run.verdict()
    assert {"accuracy", "agreement"} <= set(verdict["kind"])
    assert verdict.attrs["verdict"] == json.loads((EXAMPLE / "verdict.json").read_text())["verdict"]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_the_three_tables(tmp_path: Path, fmt: str) -> None:
    assert main(["export", str(EXAMPLE), "--format", fmt, "--out", str(tmp_path / "x")]) == 0
    for name in ("items", "pairs", "verdict"):
        assert (tmp_path / "x" / f"{name}.{fmt}").stat().st_size > 0
    import pandas as pd

    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    assert len(read(tmp_path / "x" / f"pairs.{fmt}")) == len(evalgate.load_run(EXAMPLE).pairs())


def _mmlu_run(folder: Path, answers: dict[tuple[str, int], float]) -> Path:
    """lm-eval's MMLU layout: one task per subject (mmlu_<subject>), doc_id counting per task."""
    date = "2026-12-01T10-00-00.000001"
    out = folder / "model"
    out.mkdir(parents=True)
    for subject in sorted({s for s, _ in answers}):
        rows = [
            {"doc_id": d, "doc": {"question": f"q{d}", "subject": subject}, "target": "0", "filter": "none",
             "metrics": ["acc"], "acc": acc, "doc_hash": f"{subject}{d}", "prompt_hash": f"p{subject}{d}",
             "resps": [[["-1.0", "False"]], [["-2.0", "False"]]], "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]]}
            for (s, d), acc in sorted(answers.items()) if s == subject
        ]  # fmt: skip
        (out / f"samples_mmlu_{subject}_{date}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_mmlu_subject_tasks_pool_into_one_suite(tmp_path: Path) -> None:
    keys = [(s, d) for s in ("anatomy", "astronomy") for d in range(3)]
    base = _mmlu_run(tmp_path / "b", dict.fromkeys(keys, 1.0))
    cand = _mmlu_run(tmp_path / "c", {k: 0.0 if k == ("astronomy", 2) else 1.0 for k in keys})
    code, out = _compare(tmp_path, base, cand)
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["suites"]) == ["mmlu"]
    assert manifest["suites"]["mmlu"]["item_ids"] == [
        f"{s}/test-{d}" for s, d in keys
    ]  # the live suite's ids
    row = json.loads((out / "verdict.json").read_text())["suites"][0]
    assert (row["suite"], row["metric"], row["n"], row["n10"], row["n01"]) == ("mmlu", "acc", 6, 1, 0)
    assert code in (0, 1)
