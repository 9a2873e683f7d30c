"""The decode path's drift rows: a candidate whose prompt logprobs are exact while its generated
tokens' distributions drift must BLOCK on the decode row, naming the bucket where it starts; and
a drift record that cannot be compared stops the run, naming what is wrong (never a dropped row)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from evalgate.errors import ConfigError
from evalgate.gate import GatePolicy, decide
from evalgate.store.drift_records import response_problem, text_digest
from evalgate.store.records import Pair, Record, read_records
from tests.gate.test_drift import VOCAB, _log_softmax, _top


def _positions(rng: np.random.Generator, n: int, *, drift_from: int | None, sharpen: float):
    """Per position (baseline logprobs, candidate logprobs). From ``drift_from`` on the candidate's
    logits are the baseline's times ``1 + sharpen``: the same order (the same greedy tokens), other
    probabilities: what a decode-only KV fault looks like from outside."""
    out = []
    for i in range(n):
        logits = rng.normal(0, 2, VOCAB)
        lb = _log_softmax(logits)
        lc = _log_softmax(logits * (1 + sharpen)) if drift_from is not None and i >= drift_from else lb
        out.append((lb, lc))
    return out


def _record(arm: str, doc: str, response: dict, loglik: float, tokens: int) -> Record:
    return Record(
        run_id="r", arm=arm, variant=arm, suite="drift", suite_version=2, item_id=doc, repeat=0,
        prompt_hash=f"p-{doc}", target=None, response=response, extracted=None,
        metrics={"loglik": loglik, "tokens": float(tokens)},
        extra={"sent_hash": hashlib.sha256(doc.encode()).hexdigest()[:16], "prompt_tokens": 40},
    )  # fmt: skip


def decode_pairs(
    n_docs: int,
    *,
    drift_from: int | None,
    decode: int = 80,
    forced: int = 16,
    sharpen: float = 0.6,
    seed: int = 0,
) -> list[Pair]:
    """Documents whose forced (prefill) positions are exact on both arms, and whose greedy
    generations are the same tokens with the candidate's distributions drifting from ``drift_from``."""
    rng = np.random.default_rng(seed)
    pairs = []
    for d in range(n_docs):
        doc = f"train/{d:05d}"
        prefill = _positions(rng, forced, drift_from=None, sharpen=0.0)
        ids = [int(rng.integers(VOCAB)) for _ in prefill]
        lp = [float(lb[t]) for (lb, _), t in zip(prefill, ids, strict=True)]
        steps = _positions(rng, decode, drift_from=drift_from, sharpen=sharpen)
        greedy = [int(np.argmax(lb)) for lb, _ in steps]
        arms = {}
        for arm, side in (("baseline", 0), ("candidate", 1)):
            response = {
                "path": "prefill", "ids": ids, "lp": lp, "top": [_top(lb) for lb, _ in prefill],
                "decode": {
                    "ids": list(greedy),
                    "lp": [float(s[side][t]) for s, t in zip(steps, greedy, strict=True)],
                    "top": [_top(s[side]) for s in steps],
                    "finish": "length",
                },
                # the prefill path re-reads the arm's own greedy text: exact on both arms
                "reads": [{"of": text_digest(greedy), "lp": [float(s[0][t]) for s, t in zip(steps, greedy, strict=True)],
                           "top": [_top(s[0]) for s in steps], "stop": False}],
            }  # fmt: skip
            arms[arm] = _record(arm, doc, response, sum(lp), forced)
        pairs.append(Pair(doc, 0, arms["baseline"], arms["candidate"]))
    return pairs


def _decide(pairs: list[Pair]):
    return decide({"drift": (("loglik", "tokens"), pairs)}, policy=GatePolicy(), kinds={"drift": "drift"})


def _rows(verdict, *, path: str, measure: str = "kld"):
    return [r for d in verdict.drift for r in d.rows if r.measure == measure and r.path == path]


def test_a_decode_only_drift_blocks_on_the_decode_row_with_prefill_exact() -> None:
    v = _decide(decode_pairs(20, drift_from=2))
    (prefill,) = _rows(v, path="prefill")
    assert prefill.estimate == 0.0 and prefill.status != "block"
    decode = _rows(v, path="decode")
    whole = next(r for r in decode if not r.span)
    assert whole.status == "block" and v.verdict == "BLOCK"
    assert "decode-path mean KL" in whole.reason and "decode drift starts at positions 0-63" in whole.reason


def test_a_drift_that_starts_late_is_caught_by_the_late_bucket_and_named() -> None:
    # 300 steps, drifting from 256 on: the whole-row mean is diluted by 256 exact positions
    v = _decide(decode_pairs(20, drift_from=256, decode=300, sharpen=0.4))
    decode = {r.span: r for r in _rows(v, path="decode")}
    assert set(decode) == {"", "0-63", "64-255", "256-1023"}
    assert decode["0-63"].estimate == 0.0 and decode["64-255"].estimate == 0.0
    late = decode["256-1023"]
    assert late.gated and late.status == "block" and v.verdict == "BLOCK"
    assert late.onset == "256-1023" and "starts at positions 256-1023" in late.reason
    assert decode["0-63"].gated and decode["64-255"].gated  # every bucket is gated (#53)


def test_identical_decode_paths_do_not_block_and_report_no_parting() -> None:
    v = _decide(decode_pairs(12, drift_from=None))
    assert v.verdict != "BLOCK"
    (parted,) = _rows(v, path="decode", measure="parted")
    assert parted.estimate == 0.0 and "no document" in parted.reason


def test_generations_that_part_are_compared_up_to_the_parting() -> None:
    pairs = decode_pairs(6, drift_from=None, decode=40)
    for p in pairs:  # the candidate picks another token at step 10: nothing after it is comparable
        d = p.candidate.response["decode"]
        top10 = d["top"][10]
        top10[0], top10[1] = [top10[1][0], top10[0][1]], [top10[0][0], top10[1][1]]
        d["ids"][10] = top10[0][0]
        d["lp"][10] = top10[0][1]
        # the reads the texts now need: the candidate's own, and the baseline's of the candidate's
        p.candidate.response["reads"] = [{"of": text_digest(d["ids"]), "lp": d["lp"], "top": d["top"]}]
        p.baseline.response["reads"].append({"of": text_digest(d["ids"]), "lp": d["lp"]})
    v = _decide(pairs)
    (parted,) = _rows(v, path="decode", measure="parted")
    assert parted.estimate == 1.0 and "position 10" in parted.reason
    whole = next(r for r in _rows(v, path="decode") if not r.span)
    assert whole.units == 6 * 11  # ten shared positions and the parting one, per document


def test_a_record_without_top_is_an_error_never_a_dropped_row() -> None:
    pairs = decode_pairs(8, drift_from=2)
    del pairs[3].candidate.response["top"]
    v = _decide(pairs)
    assert v.verdict == "ERROR" and "train/00003" in v.reason and "'top'" in v.reason


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda r: r["top"].__setitem__(2, r["top"][2][:5]), "short list"),
        (lambda r: r["top"][1][0].__setitem__(0, "x"), "token id 'x'"),
        (lambda r: r["top"][1][0].__setitem__(1, None), "logprob None"),
        (lambda r: r["top"].__setitem__(0, []), "top[0] is empty"),
        (lambda r: r["top"][0][0].__setitem__(0, 2**53), "token id 9007199254740992"),
        (lambda r: r["lp"].__setitem__(0, -1e6), "lp[0]"),
        (lambda r: r["lp"].__setitem__(4, 0.0), "lp[4]"),
        (lambda r: r["decode"].pop("finish"), "decode.finish"),
        (lambda r: r["decode"]["top"].pop(), "decode.top"),
    ],
)
def test_a_damaged_drift_record_names_its_file_and_line(tmp_path: Path, damage, said: str) -> None:
    pairs = decode_pairs(3, drift_from=None, decode=8)
    good, bad = pairs[0].candidate, pairs[1].candidate
    damage(bad.response)
    assert said in (response_problem(bad) or "")
    path = tmp_path / "drift.candidate.jsonl"
    path.write_text(good.to_json() + "\n" + bad.to_json() + "\n")
    with pytest.raises(ConfigError) as err:
        list(read_records(path, check=response_problem))
    assert f"{path}:2 (train/00001)" in str(err.value) and said in str(err.value)
    assert len(list(read_records(path))) == 2  # unchecked, the same file reads (other suites' readers)


def test_version_one_records_still_read_as_a_forced_path_of_unknown_kind() -> None:
    pairs = decode_pairs(10, drift_from=None, decode=4)
    for p in pairs:
        for r in (p.baseline, p.candidate):
            top = r.response["top"]
            r.response.clear()
            r.response["top"] = top
    v = _decide(pairs)
    (row,) = [r for d in v.drift for r in d.rows if r.measure == "kld"]
    assert row.path == "" and row.estimate == 0.0


def test_a_forced_token_inconsistent_with_its_list_is_refused() -> None:
    pairs = decode_pairs(2, drift_from=None, decode=4)
    r = pairs[0].candidate.response
    listed = {t: lp for t, lp in r["top"][0]}
    r["ids"][0] = next(iter(listed))
    r["lp"][0] = listed[r["ids"][0]] - 0.5
    assert "not one distribution" in (response_problem(pairs[0].candidate) or "")
    json.dumps(r)  # still plain JSON


def test_a_document_a_thousand_nats_apart_blocks_without_overflowing() -> None:
    """#43: a forced logprob of -1000 that the item checks accept overflowed the perplexity ratio
    (OverflowError, exit 3 on every report and resume); it is a BLOCK with no finite bound."""
    pairs = decode_pairs(6, drift_from=None, decode=4, forced=1)
    for p in pairs:
        for r in (p.baseline, p.candidate):  # a forced token outside both lists
            r.response["ids"] = [
                next(t for t in range(VOCAB) if t not in {a for a, _ in r.response["top"][0]})
            ]
        p.baseline.response["ids"] = p.candidate.response["ids"]
        p.baseline.response["lp"] = [min(v for _, v in p.baseline.response["top"][0]) - 1]
        p.baseline.metrics["loglik"] = p.baseline.response["lp"][0]
        p.candidate.metrics["loglik"] = -1000.0
        p.candidate.response["lp"] = [-1000.0]
    v = _decide(pairs)
    assert v.verdict == "BLOCK" and "perplexity ratio" in v.reason
    json.loads(v.to_json())  # strict enough to read back
    assert "Infinity" not in v.to_json() and "NaN" not in v.to_json()


def test_a_loglik_that_is_not_the_sum_of_its_positions_is_refused() -> None:
    (pair,) = decode_pairs(1, drift_from=None, decode=4)
    pair.candidate.metrics["loglik"] -= 0.5
    assert "is not the sum of the positions' logprobs" in (response_problem(pair.candidate) or "")


def test_one_bucket_of_positions_still_names_where_the_drift_starts() -> None:
    v = _decide(decode_pairs(10, drift_from=2, decode=16))
    assert v.verdict == "BLOCK" and "decode drift starts at positions 0-63" in v.reason
    assert not [r for r in _rows(v, path="decode") if r.span]  # one bucket: no per-bucket rows
