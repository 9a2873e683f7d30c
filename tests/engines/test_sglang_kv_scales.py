"""scripts/kv_scales.py and scripts/gpu_smoke.sh (issue #18, point 5): the GPU smoke run passes
FP8 KV scales calibrated with evalgate.kernels.fp8_kv, and prints the scale SGLang used."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[2]


def script() -> ModuleType:
    return load_file("kv_scales_script", REPO / "scripts" / "kv_scales.py")


def test_calibrated_scales_are_amax_times_margin_over_448_in_sglangs_format(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    kv = script()
    layers, heads = 3, 2

    def batch(scale: float) -> list[tuple[object, object]]:
        # [batch, heads, seq, head_dim], as transformers' cache holds K and V
        return [
            (torch.full((1, heads, 4, 8), scale * (layer + 1)), torch.full((1, heads, 4, 8), -2 * scale))
            for layer in range(layers)
        ]

    new = SimpleNamespace(layers=[SimpleNamespace(keys=k, values=v) for k, v in batch(1.0)])
    old = SimpleNamespace(key_cache=[k for k, _ in batch(0.5)], value_cache=[v for _, v in batch(0.5)])
    legacy = tuple(batch(0.25))
    calibrator = kv.calibrate(
        [kv.cache_pairs(c) for c in (new, old, legacy)], num_layers=layers, num_kv_heads=heads
    )
    out = tmp_path / "kv_scales.json"
    scales = kv.write_scales(calibrator, out, model_type="llama", margin=1.2, tp_size=1)
    # layer 0: max(|K| 1, |V| 2) = 2; layer 2: max(3, 2) = 3
    assert scales[0] == pytest.approx(2 * 1.2 / 448) and scales[2] == pytest.approx(3 * 1.2 / 448)
    written = json.loads(out.read_text())
    assert written["model_type"] == "llama" and written["kv_cache"]["dtype"] == "float8_e4m3fn"
    assert set(written["kv_cache"]["scaling_factor"]["0"]) == {"0", "1", "2"}


def test_calibration_texts_come_from_train_splits(data_dir: Path) -> None:
    texts = script().texts_from(data_dir, 6)
    assert len(texts) == 6 and all(isinstance(t, str) and t for t in texts)
    test_questions = (data_dir / "arc" / "ARC-Easy-test.jsonl").read_text()
    assert not any(json.dumps(t)[1:-1] in test_questions for t in texts[:3])
    assert script().texts_from(None, 6) == list(script().FALLBACK_TEXTS)


def test_gpu_smoke_calibrates_passes_and_prints_the_scales() -> None:
    text = (REPO / "scripts" / "gpu_smoke.sh").read_text()
    assert 'scripts/kv_scales.py "$HF_DIR" "$KV_SCALES"' in text
    assert "kv_scales_path = " in text and '"$HF_DIR" "$KV_SCALES" >"$config"' in text
    assert 'server.get("kv_scales")' in text  # the scale SGLang used, read back from its log
