"""Issue #43 (part 3, continued), lm-eval imports: ``--aa`` and a ``--drift-budget`` with no
perplexity task are refused (exit 2) naming the flag, never recorded to change nothing; gzipped
samples (``samples_*.jsonl.gz``) are read (bounded) rather than refused as "not JSON"; one run
whose lines were reordered is still one run twice; and arms whose ``model_args`` name different
tokenizers are said to."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.errors import ConfigError
from evalgate.lmeval import _rows

LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"
BASE, CAND = LMEVAL / "bf16", LMEVAL / "int4"
ROLLING = LMEVAL / "rolling"


def _compare(tmp_path: Path, base: Path, cand: Path, *flags: str) -> int:
    out = tmp_path / "run"
    return main(["compare", "--baseline-samples", str(base), "--candidate-samples", str(cand),
                 "--out", str(out), *flags])  # fmt: skip


def test_aa_on_an_import_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _compare(tmp_path, BASE, CAND, "--aa")
    err = capsys.readouterr().err
    assert code == 2 and "--aa" in err and "drop --aa" in err, err
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_a_drift_budget_on_an_import_without_perplexity_tasks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _compare(tmp_path, BASE, CAND, "--drift-budget", "kld=0.5")
    err = capsys.readouterr().err
    assert code == 2 and "--drift-budget kld=0.5" in err and "drop --drift-budget" in err, err
    assert _compare(tmp_path, ROLLING / "bf16", ROLLING / "int4", "--drift-budget", "ppl=50%") in (0, 1, 4)


def _gzipped(tmp_path: Path, src: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    for path in dst.rglob("samples_*.jsonl"):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    return dst


def test_gzipped_samples_are_read_like_plain_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _compare(tmp_path / "plain", BASE, CAND)
    plain = json.loads((tmp_path / "plain" / "run" / "verdict.json").read_text())
    base, cand = _gzipped(tmp_path, BASE, "bz"), _gzipped(tmp_path, CAND, "cz")
    assert _compare(tmp_path / "folders", base, cand) == first, capsys.readouterr().err
    (given,) = base.rglob("samples_gsm8k_*.jsonl.gz")  # a .gz given directly: no UnicodeDecodeError
    (other,) = cand.rglob("samples_gsm8k_*.jsonl.gz")
    code = _compare(tmp_path / "files", given, other)
    err = capsys.readouterr().err
    assert code in (0, 1) and "UnicodeDecodeError" not in err, err
    again = json.loads((tmp_path / "folders" / "run" / "verdict.json").read_text())
    assert again["verdict"] == plain["verdict"] and again["suites"] == plain["suites"]


def test_a_gzip_bomb_is_refused_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "samples_x_2026-01-01T00-00-00.jsonl.gz"
    data = gzip.compress(b"\n" * (_rows.MAX_SAMPLES_BYTES + 2))
    with pytest.raises(ConfigError, match="decompresses to more than"):
        _rows.gunzipped(path, data)
    with pytest.raises(ConfigError, match="cut short"):
        _rows.gunzipped(path, gzip.compress(b"{}\n")[:-12])


def test_one_run_with_its_lines_reordered_is_still_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(BASE, copy)
    for path in copy.rglob("samples_*.jsonl"):
        lines = path.read_text().splitlines()
        random.Random(0).shuffle(lines)
        path.write_text("\n".join(lines) + "\n")
    code = _compare(tmp_path, BASE, copy)
    err = capsys.readouterr().err
    assert code == 2 and "one run, twice" in err, err


def test_arms_naming_different_tokenizers_are_said_to(tmp_path: Path) -> None:
    arms = {}
    for arm, src, tok in (("b", BASE, "org/tok-a"), ("c", CAND, "org/tok-b")):
        dst = tmp_path / arm
        shutil.copytree(src, dst)
        (results,) = dst.rglob("results_*.json")
        doc = json.loads(results.read_text())
        doc["config"]["model_args"] = f"pretrained=org/model,tokenizer={tok}"
        results.write_text(json.dumps(doc))
        arms[arm] = dst
    assert _compare(tmp_path, arms["b"], arms["c"]) in (0, 1)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    notes = manifest["imported"]["candidate"]["notes"]
    assert any("different tokenizers" in n and "org/tok-a" in n and "org/tok-b" in n for n in notes), notes
    assert "different tokenizers" in (tmp_path / "run" / "summary.md").read_text()


def test_a_results_file_that_disagrees_with_its_samples_is_noted(tmp_path: Path) -> None:
    """#43: a gsm8k results JSON claiming 0.50 beside samples that score otherwise got no note; the
    samples are gated, and the manifest and terminal now say the two files disagree."""
    import shutil

    from tests.lmeval.test_samples_import import BASE, CAND, _compare

    cand = tmp_path / "claims"
    shutil.copytree(CAND, cand)
    (results,) = cand.rglob("results_*.json")
    doc = json.loads(results.read_text())
    doc["results"]["gsm8k"]["exact_match,flexible-extract"] = 0.5
    results.write_text(json.dumps(doc))
    _, out = _compare(tmp_path, BASE, cand)
    notes = json.dumps(json.loads((out / "manifest.json").read_text())["imported"])
    assert "results file claims exact_match,flexible-extract 0.5" in notes
    _, honest = _compare(tmp_path / "h", BASE, CAND)
    assert "results file claims" not in json.dumps(
        json.loads((honest / "manifest.json").read_text())["imported"]
    )
