"""lm-eval perplexity tasks (``loglikelihood_rolling``) imported as per-document log-likelihoods (#30).

tests/fixtures/lmeval/rolling/ is real lm-eval 0.4.13 ``--log_samples`` output of lm-eval's own
wikitext task over 36 GSM8K train problems, made with lm-eval's CLI and evalgate's model on the
CPU engine against the F16 and the Q4_0 GGUF (``scripts/make_rolling_fixture.py``; its README
says how). Each document's metrics are ``[loglik, count]`` pairs.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.gate import load_run, verdict_for
from evalgate.lmeval.model import _rolling
from evalgate.lmeval.samples import import_samples
from evalgate.request import CompareRequest
from evalgate.stats import rolling_aggregates
from tests.helpers.samples import edited_samples

ROLLING = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval" / "rolling"
BASE, CAND = ROLLING / "bf16", ROLLING / "int4"
TASK = "rolling_gsm8k"


def _samples(folder: Path) -> list[dict[str, Any]]:
    (path,) = folder.rglob(f"samples_{TASK}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _own(folder: Path) -> dict[str, float]:
    """lm-eval's own aggregates from the arm's results JSON."""
    (path,) = folder.rglob("results_*.json")
    res = json.loads(path.read_text())["results"][TASK]
    return {m: res[f"{m},none"] for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")}


def _import(tmp_path: Path, base: Path = BASE, cand: Path = CAND) -> Path:
    req = CompareRequest(
        baseline="bf16",
        candidate="int4",
        baseline_samples=(base,),
        candidate_samples=(cand,),
        out=tmp_path / "run",
        same_server_ok=True,  # some tests import one run (or a copy) on both arms: an A/A (#31)
    )
    return import_samples(req)


def _records(run: Path, arm: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "items" / f"{TASK}.{arm}.jsonl").read_text().splitlines()]


def test_the_fixture_imports_as_a_drift_suite_of_per_document_logliks(tmp_path: Path) -> None:
    run = _import(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    suite = manifest["suites"][TASK]
    assert (suite["metric_kind"], suite["kind"]) == ("drift", "loglikelihood")
    assert suite["metrics"] == ["loglik", "words", "bytes"]
    assert suite["n"] == 36 and suite["item_ids"] == [str(i) for i in range(36)]
    assert "lm-eval's own word_perplexity" in suite["source"]
    for arm, folder in (("baseline", BASE), ("candidate", CAND)):
        logged = {s["doc_id"]: s for s in _samples(folder)}
        records = _records(run, arm)
        assert len(records) == 36
        for r in records:
            s = logged[int(r["item_id"])]
            assert r["response"] is None and r["extracted"] is None
            assert r["metrics"] == {
                "loglik": s["word_perplexity"][0],
                "words": s["word_perplexity"][1],
                "bytes": s["byte_perplexity"][1],
            }
            assert all(math.isfinite(v) for v in r["metrics"].values())
            assert r["extra"]["lm_eval"] == {"task": TASK, "doc_id": s["doc_id"], "doc_hash": s["doc_hash"]}
        own = manifest["imported"][arm]["aggregates"][TASK]
        assert own == _own(folder)
        assert not manifest["imported"][arm]["notes"]  # the samples agree with lm-eval's aggregate


@pytest.mark.parametrize("folder", [BASE, CAND], ids=["bf16", "int4"])
def test_rolling_aggregates_are_lmevals_own(tmp_path: Path, folder: Path) -> None:
    run = _import(tmp_path, folder, folder)
    mine = rolling_aggregates(r["metrics"] for r in _records(run, "baseline"))
    own = _own(folder)
    assert set(mine) == set(own)
    for metric, value in own.items():
        assert mine[metric] == pytest.approx(value, rel=1e-9), metric


def test_the_quantized_arm_has_the_higher_perplexity() -> None:
    """Q4_0 against F16 of the same model: a real, small loss (the fixture is what it says)."""
    b, c = _own(BASE), _own(CAND)
    assert 1.0 < c["word_perplexity"] / b["word_perplexity"] < 1.5


def test_rolling_aggregates_by_hand() -> None:
    docs = [{"loglik": -10.0, "words": 4.0, "bytes": 20.0}, {"loglik": -6.0, "words": 4.0, "bytes": 12.0}]
    got = rolling_aggregates(docs)
    assert got["word_perplexity"] == pytest.approx(math.exp(16 / 8))
    assert got["byte_perplexity"] == pytest.approx(math.exp(16 / 32))
    assert got["bits_per_byte"] == pytest.approx(16 / 32 / math.log(2))
    assert rolling_aggregates([{"loglik": -1.0, "words": 2.0}]) == {"word_perplexity": math.exp(0.5)}
    assert rolling_aggregates([]) == {}


def _set(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.update(values)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r["word_perplexity"].__setitem__(0, float("nan")), "non-finite loglik"),
        (lambda r: r["bits_per_byte"].__setitem__(0, float("-inf")), "non-finite loglik"),
        (lambda r: r["byte_perplexity"].__setitem__(1, 0), "must be > 0"),
        (_set(word_perplexity=[-12.5]), "not a [loglik, count] pair"),
        (_set(word_perplexity=["-12.5", 40]), "not a [loglik, count] pair"),
        (
            lambda r: r["byte_perplexity"].__setitem__(0, r["byte_perplexity"][0] - 1.0),
            "one document has one loglik",
        ),
        (
            lambda r: r["bits_per_byte"].__setitem__(1, r["bits_per_byte"][1] + 1),
            "one document has one bytes",
        ),
        (_set(metrics=["my_ppl"], my_ppl=[-3.0, 4]), "no known unit"),
    ],
    ids=["nan", "-inf", "zero-count", "one-element", "string", "lls-differ", "bytes-differ", "unknown-unit"],
)
def test_a_bad_document_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[dict[str, Any]], None], says: str
) -> None:
    cand = edited_samples(tmp_path, CAND, TASK, change)
    out = tmp_path / "run"
    code = main(
        ["compare", "--baseline-samples", str(BASE), "--candidate-samples", str(cand), "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"candidate: {TASK} doc_id 5" in err and says in err
    assert not (out / "manifest.json").exists()


def test_a_rolling_task_that_logs_no_pairs_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """output_type loglikelihood_rolling in the results JSON decides, even with no pair logged."""

    def scalars(r: dict[str, Any]) -> None:
        for m in r["metrics"]:
            r[m] = r[m][0]

    cand = edited_samples(tmp_path, CAND, TASK, scalars, doc_id=None)
    out = tmp_path / "run"
    code = main(
        ["compare", "--baseline-samples", str(BASE), "--candidate-samples", str(cand), "--out", str(out)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"candidate: {TASK} doc_id 0: word_perplexity = " in err and "is not a [loglik, count] pair" in err


class _Scorer:
    """Per-token logprob -(token id)/100, whatever the context: the sum over a document's
    windows is then known exactly, and each call's context can be checked."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.calls: list[tuple[list[int], int]] = []

    async def tokenize(self, text: str) -> list[int]:
        return list(self.tokens)

    async def token_distributions(self, tokens: list[int], *, start: int, top_k: int) -> list[Any]:
        assert top_k == 1 and start >= 1
        self.calls.append((list(tokens), start))
        return [(-t / 100, ((t, -t / 100),)) for t in tokens[start:]]


@pytest.mark.parametrize("n", [1, 5, 8, 9, 23])
def test_rolling_windows_score_every_token_once_as_lm_eval_does(n: int) -> None:
    """lm-eval's windows (utils.get_rolling_token_windows, make_disjoint_window): the first
    behind the prefix token, each window at most max_len tokens of input, every token predicted
    exactly once, each window's context the tokens just before it."""
    tokens = list(range(10, 10 + n))
    scorer = _Scorer(tokens)
    total = asyncio.run(_rolling(scorer, "doc", prefix=7, max_len=8))  # type: ignore[arg-type]
    assert total == pytest.approx(-sum(tokens) / 100)
    predicted = [t for seq, start in scorer.calls for t in seq[start:]]
    assert predicted == tokens
    assert scorer.calls[0][0][:1] == [7] and scorer.calls[0][1] == 1
    for seq, _ in scorer.calls:
        assert len(seq) - 1 <= 8  # the model reads at most max_len tokens to predict them all
        real = seq[1:] if seq[0] == 7 else seq  # every window is consecutive tokens of the document
        i = tokens.index(real[0])
        assert real == tokens[i : i + len(real)]


def test_the_verdicts_perplexity_ratio_is_lm_evals_own_ratio(tmp_path: Path) -> None:
    """The gate's drift rows for the imported pair (gate/_drift.py, the lead's): the estimate of
    the per-word and the per-byte perplexity ratio is lm-eval's candidate/baseline aggregate."""
    verdict = verdict_for(load_run(_import(tmp_path)))
    (drift,) = verdict.drift
    rows = {r.unit: r for r in drift.rows if r.measure == "ppl_ratio"}
    b, c = _own(BASE), _own(CAND)
    assert rows["words"].estimate == pytest.approx(c["word_perplexity"] / b["word_perplexity"], rel=1e-9)
    assert rows["bytes"].estimate == pytest.approx(c["byte_perplexity"] / b["byte_perplexity"], rel=1e-9)
    assert rows["words"].n == 36


def test_without_a_results_json_the_logged_pairs_say_it_is_a_perplexity_task(tmp_path: Path) -> None:
    arms = []
    for name, src in (("b", BASE), ("c", CAND)):
        shutil.copytree(src, tmp_path / name)
        for p in (tmp_path / name).rglob("results_*.json"):
            p.unlink()
        arms.append(tmp_path / name)
    run = _import(tmp_path, *arms)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["suites"][TASK]["metric_kind"] == "drift"
    assert manifest["imported"]["baseline"]["aggregates"] == {}  # nothing of lm-eval's own to show


def test_gold_pred_pairs_of_corpus_metrics_are_not_perplexity(tmp_path: Path) -> None:
    """lm-eval's mcc and f1 log (gold, pred) per document: two numbers, not [loglik, count]."""
    arms = []
    for name in ("b", "c"):
        folder = tmp_path / name / "model"
        folder.mkdir(parents=True)
        rows = [
            {"doc_id": d, "doc": {"q": d}, "target": "1", "filter": "none", "metrics": ["mcc"],
             "mcc": [d % 2, 1], "doc_hash": f"h{d}", "prompt_hash": f"p{d}", "resps": [["x"]],
             "filtered_resps": ["x"]}
            for d in range(4)
        ]  # fmt: skip
        (folder / "samples_cola_2026-12-01T10-00-00.000001.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
        arms.append(tmp_path / name)
    run = _import(tmp_path, *arms)
    assert json.loads((run / "manifest.json").read_text())["suites"]["cola"]["metric_kind"] != "drift"
