"""The drift suite on the real llama-server (#30, #42): the A/A pair is exactly 0 with
--deterministic and passes without a bound it cannot have, every row on the decode path (llama.cpp
generates the forced tokens); a 4-bit KV cache blocks on the drift rows alone, at n where accuracy
could not tell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main

pytestmark = pytest.mark.e2e

KV4 = """
[variants.kv4]
base = "bf16"
kv = "fp8"
args = { "-ctk" = "q4_0", "-ctv" = "q4_0" }
"""


def drift_rows(run: Path) -> dict[tuple[str, str], dict[str, Any]]:
    verdict = json.loads((run / "verdict.json").read_text())
    (section,) = verdict["drift"]
    return {(r["measure"], r["pair"]): r for r in section["rows"]}


def test_deterministic_aa_drift_is_exactly_zero(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "aa"
    code = main(["compare", "--baseline", "bf16", "--candidate", "bf16", "--deterministic", "--suites", "drift",
                 "--limit", "8", "--data-dir", str(data_dir), "--out", str(run)])  # fmt: skip
    assert code == 0
    rows = drift_rows(run)
    kld, ppl = rows[("kld", "candidate")], rows[("ppl_ratio", "candidate")]
    assert kld["estimate"] == 0.0 and kld["path"] == "decode" and kld["status"] != "block"
    # every document identical: no size to bound the drift by, and no advice that cannot help
    assert kld["upper"] is None and "identical on all 8 documents" in kld["reason"]
    assert ppl["estimate"] == 1.0 and rows[("top1_agree", "candidate")]["estimate"] == 1.0
    assert all(r["status"] != "block" for r in rows.values())
    base = [json.loads(x) for x in (run / "items" / "drift.baseline.jsonl").read_text().splitlines()]
    assert all(len(r["response"]["top"]) == r["tokens"]["scored"] == 32 for r in base)
    assert all(r["response"]["path"] == "decode" and "decode" not in r["response"] for r in base)
    assert all(len(r["response"]["lp"]) == len(r["response"]["ids"]) == 32 for r in base)


def test_four_bit_kv_blocks_on_the_drift_rows(data_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "evalgate.toml"
    config.write_text(KV4)
    run = tmp_path / "kv4"
    code = main(["compare", "--config", str(config), "--baseline", "bf16", "--candidate", "kv4", "--suites",
                 "drift", "--limit", "12", "--data-dir", str(data_dir), "--out", str(run)])  # fmt: skip
    assert code == 1
    rows = drift_rows(run)
    kld = rows[("kld", "candidate")]
    assert kld["status"] == "block" and kld["lower"] > kld["budget"] == 0.01, kld
    verdict = json.loads((run / "verdict.json").read_text())
    assert "decode-path mean KL" in verdict["reason"] and "above the budget" in verdict["reason"]
    assert "drift" in (run / "summary.md").read_text()


def test_greedy_texts_are_read_across_the_arms_on_the_real_server(data_dir: Path, tmp_path: Path) -> None:
    """#53 on llama.cpp: with decode_tokens set, both arms decode greedily; where a document's
    generations part, each arm reads the other's text (the baseline launched again after the
    candidate) through the grammar's forcing, and the cross and length rows are computed from them."""
    config = tmp_path / "evalgate.toml"
    config.write_text(KV4)
    run = tmp_path / "kv4-greedy"
    code = main(["compare", "--config", str(config), "--baseline", "bf16", "--candidate", "kv4", "--suites", "drift",
                 "--limit", "12", "--suite-opt", "drift.decode_tokens=32", "--data-dir", str(data_dir),
                 "--out", str(run)])  # fmt: skip
    assert code == 1  # the 4-bit cache still blocks
    rows = drift_rows(run)
    assert {"cross", "length", "parted"} <= {m for m, _ in rows}
    assert (
        rows[("cross", "candidate")]["path"] == "decode" and rows[("cross", "candidate")]["status"] != "info"
    )

    def latest(arm: str) -> dict[str, Any]:
        out = {}
        for line in (run / "items" / f"drift.{arm}.jsonl").read_text().splitlines():
            r = json.loads(line)
            out[r["item_id"]] = r
        return out

    base, cand = latest("baseline"), latest("candidate")
    parted = [i for i in base if base[i]["response"]["decode"]["ids"] != cand[i]["response"]["decode"]["ids"]]
    assert parted, "a 4-bit KV cache parts some of 12 greedy generations"
    for i in parted:  # each arm read the other's text, as long as it is
        for reader, writer in ((base, cand), (cand, base)):
            (read,) = reader[i]["response"]["reads"]
            assert len(read["lp"]) == len(writer[i]["response"]["decode"]["ids"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert (
        manifest["suites"]["drift"]["decode_tokens"] == 32
        and manifest["suites"]["drift"]["decode_everywhere"]
    )
