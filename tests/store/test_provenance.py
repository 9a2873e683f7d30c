"""The rules of evalgate/store/provenance.py on plain values: the side-by-side rows, the fallbacks,
--expect's parsing and checking, the declared-differences line, and the manifest field (old run
folders, which have none, still load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.errors import ConfigError
from evalgate.store.facts import ServerFacts
from evalgate.store.manifest import load_manifest
from evalgate.store.provenance import (
    Provenance,
    declared_differences,
    expectation_errors,
    fallbacks,
    parse_expect,
    what_ran,
)

OLD_RUN = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "schema1_run_bf16_vs_fp8kv"


def test_rows_mark_differences_and_never_an_unreported_fact() -> None:
    b = Provenance(kv_cache_dtype="f16", attention_backend="flash_attn")
    c = Provenance(kv_cache_dtype="q8_0")
    rows = {r.key: r for r in what_ran(b, c)}
    assert list(rows) == ["kv_cache_dtype", "attention_backend"]  # FIELDS order, reported ones only
    assert rows["kv_cache_dtype"].differs and rows["kv_cache_dtype"].label == "KV cache dtype"
    assert rows["attention_backend"].candidate == "not reported" and not rows["attention_backend"].differs
    assert what_ran(None, None) == []  # an old run folder: no table


def test_fallbacks_name_both_values() -> None:
    base = Provenance(attention_backend="fa3")
    wide = Provenance(kv_cache_dtype="bfloat16", kv_scales="none", attention_backend="fa3")
    assert fallbacks(base, wide, fp8_kv_asked=True, scales_given=False) == [
        "fallback: the candidate asked for an FP8 KV cache but its server reports a bfloat16 cache"
    ]
    assert fallbacks(base, wide, fp8_kv_asked=False, scales_given=False) == []
    q8 = Provenance(kv_cache_dtype="q8_0")  # llama.cpp's 8-bit stand-in is what fp8kv asks there
    assert fallbacks(None, q8, fp8_kv_asked=True, scales_given=False) == []
    unscaled = Provenance(kv_cache_dtype="fp8_e4m3", kv_scales="1.0", attention_backend="triton")
    (scales, attention) = fallbacks(base, unscaled, fp8_kv_asked=True, scales_given=True)
    assert scales == "fallback: KV scales were given to the candidate but its server reports scales of 1.0"
    assert "candidate's attention backend is triton, the baseline's fa3" in attention
    assert fallbacks(base, unscaled, fp8_kv_asked=True, scales_given=False)[0].startswith(
        "fallback: the candidate's"
    )
    assert fallbacks(base, None, fp8_kv_asked=True, scales_given=True) == []


def test_expect_parses_and_refuses_what_it_cannot_check() -> None:
    assert parse_expect(["candidate.kv_cache_dtype=fp8_e4m3", "baseline.attention_backend = fa3"]) == {
        "candidate": {"kv_cache_dtype": "fp8_e4m3"},
        "baseline": {"attention_backend": "fa3"},
    }
    for bad, said in (
        ("kv_cache_dtype=fp8", "is not ARM.FACT=VALUE"),
        ("candidate.kv_cache_dtype=", "is not ARM.FACT=VALUE"),
        ("candidat.kv_cache_dtype=fp8", "did you mean candidate?"),
        ("candidate.attention=fa3", "did you mean attention_backend?"),
    ):
        with pytest.raises(ConfigError) as refused:
            parse_expect([bad])
        assert said in refused.value.render()


def test_expect_names_both_values_or_says_it_could_not_confirm() -> None:
    ran = Provenance(kv_cache_dtype="bfloat16")
    assert expectation_errors("candidate", {"kv_cache_dtype": "fp8"}, ran) == [
        "the candidate's server reports KV cache dtype 'bfloat16', but --expect candidate.kv_cache_dtype=fp8 "
        "expected 'fp8'"
    ]
    assert expectation_errors("candidate", {"kv_cache_dtype": "BFloat16"}, ran) == []
    assert (
        expectation_errors("candidate", {"kv_cache_dtype": "fp8"}, Provenance(kv_cache_dtype="fp8_e5m2"))
        == []
    )
    (unknown,) = expectation_errors("baseline", {"speculative": "off"}, ran)
    assert (
        "does not report its speculative decoding, so --expect baseline.speculative=off could not be confirmed"
        in unknown
    )


def test_declared_differences_line() -> None:
    sides = {"tp_size": (2, 1), "--tp-size": ("2", "1"), "dp_size": (1, 1)}
    assert declared_differences([], sides) is None
    assert declared_differences(["tp_size"], sides) == "declared differences: tp_size 2 -> 1 (--allow-diff)"
    assert declared_differences(["dp_size", "--x"], sides) == (
        "declared differences: dp_size (no difference recorded), --x (--allow-diff)"
    )
    assert declared_differences(["--new"], {"--new": (None, "(flag)")}) == (
        "declared differences: --new (absent) -> (flag) (--allow-diff)"
    )


def test_the_manifest_field_round_trips_and_old_folders_load() -> None:
    facts = ServerFacts.model_validate(
        {"kv_buffers_mib": {"K": 1}, "provenance": Provenance(kv_cache_dtype="q8_0")}
    )
    dumped = json.loads(json.dumps(facts.to_dict()))
    assert (
        dumped["provenance"]["kv_cache_dtype"] == "q8_0" and dumped["provenance"]["attention_backend"] is None
    )
    assert ServerFacts.model_validate(dumped).provenance == Provenance(kv_cache_dtype="q8_0")
    old = load_manifest(OLD_RUN)  # written before provenance was recorded
    assert all(info.server.provenance is None for info in old.arms.values())
