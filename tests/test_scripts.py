"""scripts/gpu_smoke.sh and scripts/gguf_to_hf.py: the paths that need no GPU, SGLang or transformers.

The real conversion and the GPU run cannot happen in CI; these tests pin what a user on the
wrong machine sees (a cause and a fix, exit 2) and the config rewrites that let SGLang on
transformers 4.x load a checkpoint that transformers 5.x saved.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "scripts" / "gpu_smoke.sh"
CONVERT = REPO / "scripts" / "gguf_to_hf.py"
BASH = shutil.which("bash")

needs_bash = pytest.mark.skipif(BASH is None, reason="bash not installed")


def _smoke(path: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the smoke script with nothing on PATH but ``path`` (the checks use builtins only)."""
    assert BASH is not None
    return subprocess.run(
        [BASH, str(SMOKE)], capture_output=True, text=True, timeout=60, env={"PATH": path, **env}
    )


def _fake_nvidia_smi(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)
    return folder


@needs_bash
def test_smoke_script_parses() -> None:
    assert BASH is not None
    proc = subprocess.run([BASH, "-n", str(SMOKE)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@needs_bash
def test_smoke_script_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed")
    proc = subprocess.run([shellcheck, str(SMOKE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


@needs_bash
def test_smoke_without_nvidia_smi_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _smoke(str(empty))
    assert proc.returncode == 2
    assert "error: nvidia-smi is not on PATH" in proc.stderr
    assert "fix:" in proc.stderr


@needs_bash
def test_smoke_with_failing_nvidia_smi_says_so(tmp_path: Path) -> None:
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", "echo 'NVIDIA-SMI has failed: no driver' >&2; exit 9")
    proc = _smoke(str(bin_dir))
    assert proc.returncode == 2
    assert "error: nvidia-smi failed: NVIDIA-SMI has failed" in proc.stderr


@needs_bash
@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_smoke_without_sglang_says_how_to_install(tmp_path: Path) -> None:
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", "echo 'GPU 0: Fake GPU (UUID: GPU-0)'")
    proc = _smoke(str(bin_dir), PYTHON=sys.executable)
    assert proc.returncode == 2
    assert "cannot import sglang" in proc.stderr
    assert "pip install 'evalgate[sglang]'" in proc.stderr


def test_convert_help() -> None:
    proc = subprocess.run(
        [sys.executable, str(CONVERT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
    assert "--dtype" in proc.stdout


def test_convert_without_transformers_says_how_to_install(tmp_path: Path) -> None:
    # -S: no site-packages at all, so transformers, gguf and torch are hidden wherever they live
    src = tmp_path / "model.gguf"
    src.write_bytes(b"GGUF")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(CONVERT), str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "not importable" in proc.stderr
    assert "fix: pip install transformers gguf accelerate" in proc.stderr
    assert not (tmp_path / "out").exists()


def _convert_module() -> ModuleType:
    return load_file("gguf_to_hf", CONVERT, register=True)


def _smollm2_meta(mod: ModuleType) -> Any:
    """The SmolLM2 GGUF's tokenizer header, abridged to the tokens the ids point at."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Hello"]
    return mod.GgufTokenizer(
        model="gpt2", tokens=tokens, add_bos=False, add_eos=False, bos_id=1, eos_id=2, unk_id=0, pad_id=2
    )


def test_fixes_turn_a_transformers5_checkpoint_into_one_4x_loads(tmp_path: Path) -> None:
    mod = _convert_module()
    # what transformers 5.x writes for the SmolLM2 GGUF (abridged)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "dtype": "bfloat16",
                "max_position_embeddings": 8192,
                "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
                "quantization_config": {"quant_method": "gguf", "dequantize": True},
            }
        )
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "TokenizersBackend", "is_local": True, "eos_token": "<|im_end|>"})
    )
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    (tmp_path / "chat_template.jinja").write_text(template)

    mod.fix_config(tmp_path / "config.json", "bfloat16")
    mod.fix_tokenizer_config(tmp_path, SimpleNamespace(chat_template=None), _smollm2_meta(mod))

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_theta"] == 100000.0
    assert config["torch_dtype"] == "bfloat16"
    assert "quantization_config" not in config  # else SGLang would treat the folder as quantized
    tok = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok["chat_template"] == template
    assert tok["model_input_names"] == ["input_ids", "attention_mask"]
    assert tok["clean_up_tokenization_spaces"] is False
    assert tok["model_max_length"] == 8192
    assert "is_local" not in tok


def test_tokenizer_config_is_rewritten_from_the_gguf_not_from_4x(tmp_path: Path) -> None:
    mod = _convert_module()
    # transformers 4.57 builds a Llama tokenizer from the GGUF: wrong EOS, BOS on, clean-up on
    wrong = {"bos_token": "<|im_start|>", "eos_token": "<|im_start|>", "unk_token": "<|endoftext|>"}
    saved = {**wrong, "add_bos_token": True, "clean_up_tokenization_spaces": True, "legacy": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**saved, "added_tokens_decoder": {}}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(wrong))

    mod.fix_tokenizer_config(tmp_path, SimpleNamespace(chat_template="{{ x }}"), _smollm2_meta(mod))

    tok = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tok["eos_token"] == "<|im_end|>"
    assert tok["pad_token"] == "<|im_end|>"
    assert tok["bos_token"] == "<|im_start|>"
    assert tok["add_bos_token"] is False
    assert tok["clean_up_tokenization_spaces"] is False
    assert "legacy" not in tok
    assert tok["added_tokens_decoder"] == {}
    assert not (tmp_path / "special_tokens_map.json").exists()  # 4.x would read its EOS over ours


def test_tokenizer_json_adds_bos_exactly_as_the_gguf_says(tmp_path: Path) -> None:
    mod = _convert_module()
    path = tmp_path / "tokenizer.json"
    bos_template = mod.template_processing({"<|im_start|>": 1}, bos_first=True)
    path.write_text(json.dumps({"post_processor": bos_template, "decoder": {"type": "Sequence"}}))
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda i: _smollm2_meta(mod).tokens[i])

    mod.fix_tokenizer_json(path, tokenizer, _smollm2_meta(mod))

    data = json.loads(path.read_text())
    assert data["post_processor"]["single"] == [{"Sequence": {"id": "A", "type_id": 0}}]
    assert data["post_processor"]["special_tokens"] == {}
    assert data["decoder"]["type"] == "ByteLevel"  # 4.x gives a byte-level BPE a SentencePiece decoder
    assert [next(iter(p)) for p in bos_template["single"]] == ["SpecialToken", "Sequence"]


def test_fix_config_refuses_a_config_without_rope_theta(tmp_path: Path) -> None:
    mod = _convert_module()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(mod.ScriptError, match="no rope_theta"):
        mod.fix_config(tmp_path / "config.json", "bfloat16")
