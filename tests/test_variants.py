from __future__ import annotations

import pytest

from evalgate.errors import ConfigError
from evalgate.variants import LaunchSpec, check_only_quantization, parse_variant

QUANT = frozenset({"model", "-ctk", "-ctv"})


def spec(**args: str | None) -> LaunchSpec:
    base = {"-c": "16384", "-np": "4", "-ctk": "f16", "-ctv": "f16"}
    base.update(args)
    return LaunchSpec("llamacpp", "/m/f16.gguf", tuple(base.items()), (), QUANT)


def test_builtins_and_composition() -> None:
    assert parse_variant("bf16").weights == "bf16" and parse_variant("bf16").kv == "bf16"
    assert parse_variant("fp8kv").kv == "fp8"
    v = parse_variant("int4+fp8kv")
    assert (v.weights, v.kv, v.name) == ("int4", "fp8", "int4+fp8kv")


def test_conflicting_composition_is_refused() -> None:
    with pytest.raises(ConfigError, match="sets weights twice"):
        parse_variant("int4+fp8")


def test_unknown_variant_suggests_nearest() -> None:
    with pytest.raises(ConfigError) as err:
        parse_variant("fp8_kv")
    assert "did you mean 'fp8kv'" in err.value.fix


def test_only_quantization_may_differ() -> None:
    a = spec()
    b = LaunchSpec("llamacpp", "/m/q4.gguf", spec(**{"-ctk": "q8_0", "-ctv": "q8_0"}).args, (), QUANT)
    assert check_only_quantization(a, b) == []


def test_context_length_difference_is_reported() -> None:
    diffs = check_only_quantization(spec(), spec(**{"-c": "8192"}))
    assert diffs == [("-c", "16384", "8192")]


def test_flag_present_on_one_side_and_env_are_compared() -> None:
    b = LaunchSpec("llamacpp", "/m/f16.gguf", spec(**{"--no-warmup": None}).args, (("OMP", "1"),), QUANT)
    keys = [k for k, _, _ in check_only_quantization(spec(), b)]
    assert keys == ["--no-warmup", "env:OMP"]


def test_allow_diff_escape_hatch() -> None:
    assert check_only_quantization(spec(), spec(**{"-c": "8192"}), allow=["-c"]) == []
