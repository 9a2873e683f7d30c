#!/usr/bin/env python
"""Write the Q4_0 GGUF as a W4A16 (INT4 weights, 16-bit activations) checkpoint that vLLM serves.

Why: the ``int4`` candidate on the llama.cpp engine runs the Q4_0 GGUF; on vLLM's CPU backend the
same 4-bit weights run through vLLM's INT4 kernel (``CPUWNA16LinearKernel``) only from a
compressed-tensors checkpoint. GGUF Q4_0 already is what that format holds: each block of 32
weights along the input dim has one fp16 scale ``d`` and 4-bit codes ``q`` in 0..15 with
``w = d * (q - 8)``, i.e. compressed-tensors' ``pack-quantized`` with weights
``{num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 32}`` (vLLM's scalar type
``uint4b8``: stored code minus 8). So the codes and scales are copied, not re-quantized.

How (read from vLLM 0.32 and compressed-tensors 0.17, nothing copied from them):

- ``<layer>.weight_packed``: int32 ``[out, in / 8]``, packed along the input dim; code ``j`` of each
  run of 8 sits in bits ``4j..4j+3`` (compressed_tensors/compressors/pack_quantized/helpers.py
  ``pack_to_int32``; vllm/model_executor/layers/quantization/utils/quant_utils.py
  ``unpack_quantized_values_into_int32``). The stored code is GGUF's ``q`` (signed value + 8). The
  packing and unpacking are ``evalgate.kernels.int4``'s (``pack_int4``, ``dequantize_int4``), the
  same layout the kernels' numerics check scores: evalgate's when it is installed, else this
  checkout's ``kernels/`` (found as ``scripts/kv_scales.py`` finds it).
- ``<layer>.weight_scale``: ``[out, in / 32]`` in the model dtype, bfloat16: vLLM creates the
  parameter in that dtype (compressed_tensors_wNa16.py ``create_weights``) and narrows a float16
  scale on load with a warning per layer (model_executor/models/utils.py), as transformers'
  compressed-tensors loader also does; so bfloat16 scales are the weights vLLM computes with.
  Rounding GGUF's fp16 ``d`` to bfloat16 moves about 0.7% of the weights by one bfloat16 step.
  ``--scale-dtype float16`` keeps ``d`` exactly (the checkpoint then equals the twin bit for bit).
- ``<layer>.weight_shape``: int64 ``[out, in]``.
- GGUF blocks are stored as 16 bytes whose low nibbles are codes 0..15 and high nibbles 16..31;
  llama.cpp also permuted the rows of ``attn_q``/``attn_k`` for its RoPE layout, undone here as
  transformers' GGUF loader does (a row permutation keeps the input-dim blocks whole).
- Tensors that are not Q4_0 (SmolLM2: the Q8_0 token embedding, which the tied ``lm_head`` shares,
  and the F32 norms) are dequantized to bfloat16 and their linear modules listed in ``ignore``.

Tokenizer, chat template and generation files are copied from the GGUF's bf16 Hugging Face twin
(``scripts/gguf_to_hf.py``, the ``Q4_0-hf`` folder that ``evalgate setup --sglang-cpu`` makes);
``config.json`` is the twin's plus ``quantization_config``. Then the written checkpoint is read
back, unpacked in that bit order, dequantized and compared with the twin: with float16 scales every
weight must equal the twin's bit for bit; with bfloat16 scales each may differ by one bfloat16
step, and the count and size of the differences are printed.

Usage: ``python scripts/gguf_to_w4a16.py [SRC.gguf [OUT_DIR]] [--twin DIR] [--scale-dtype bfloat16]``.
Needs numpy, gguf, torch and safetensors (the SGLang CPU venv has them).
Exit codes: 0 written and checked, 2 missing packages or bad input, 3 the check failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package; `python -I` leaves it off

from _gguf_cli import ScriptError, converter_parser, fail_check, out_beside, require, run

try:
    import numpy as np
except ImportError:  # main() says what to install
    np = None  # type: ignore[assignment]

GROUP = 32
"""Q4_0's block length = the compressed-tensors group size."""
BITS = 4
BLOCK_BYTES = 2 + GROUP // 2
"""A Q4_0 block: fp16 scale, then 16 bytes of nibbles."""
SCALE_DTYPES = ("float16", "bfloat16")
BF16_SCALE_TOLERANCE = 2.0**-6
"""Largest relative difference bfloat16 scales may make, with room: rounding the scale moves the
product by at most 2^-9 of itself, so its bfloat16 rounding by at most one step (2^-7 relative)."""
COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
INSTALL_FIX = (
    "pip install numpy gguf torch safetensors  (or run it with ~/.cache/evalgate/sglang-cpu/venv/bin/python)"
)
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
NOT_LINEAR = ("model.embed_tokens", "input_layernorm", "post_attention_layernorm", "model.norm")
"""Modules kept 16-bit whatever their GGUF type: not linears, so not in ``ignore`` either."""
KEPT_LINEARS = ("lm_head",)
"""Linears kept 16-bit whatever their GGUF type (the tied or separate output layer), listed in ``ignore``."""


# --- the format: GGUF's side in numpy, compressed-tensors' through evalgate.kernels.int4 ---------


def q4_0_codes(raw: Any) -> tuple[Any, Any]:
    """GGUF Q4_0 rows (uint8 ``[rows, blocks * 18]``) -> (codes uint8 ``[rows, blocks * 32]`` in
    0..15, scales float16 ``[rows, blocks]``), so that ``w = scale * (code - 8)``."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    rows, width = raw.shape
    if width % BLOCK_BYTES:
        raise ValueError(f"a Q4_0 row is whole {BLOCK_BYTES}-byte blocks, got {width} bytes")
    blocks = raw.reshape(rows, width // BLOCK_BYTES, BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0]
    nibbles = blocks[..., 2:]
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # low: 0..15, high: 16..31
    return codes.reshape(rows, -1), scales


def kernels_int4() -> ModuleType:
    """``evalgate.kernels.int4``: installed, or loaded from this checkout (an engine's venv has torch
    but not evalgate; ``scripts/kv_scales.py``'s ``import_kernels`` makes it importable)."""
    try:
        from evalgate.kernels import int4
    except ModuleNotFoundError:
        path = Path(__file__).resolve().with_name("kv_scales.py")
        spec = importlib.util.spec_from_file_location("kv_scales", path)
        if spec is None or spec.loader is None:
            raise ScriptError(f"cannot load {path}", "run the script from an evalgate checkout") from None
        kv_scales = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kv_scales)
        kv_scales.import_kernels()
        from evalgate.kernels import int4
    return int4


def pack_codes(codes: Any) -> Any:
    """Codes uint8 ``[rows, cols]`` in 0..15 -> ``weight_packed``, int32 ``[rows, cols / 8]``: the
    kernels' ``pack_int4`` of the signed values ``code - 8`` (it stores each as the nibble ``code``)."""
    import torch

    if codes.shape[1] % GROUP:
        raise ValueError(f"the input dim ({codes.shape[1]}) must be a multiple of the group, {GROUP}")
    return kernels_int4().pack_int4(torch.from_numpy(codes.astype(np.int8) - np.int8(8)), dim=1)


def dequantize(packed: Any, scales: Any) -> Any:
    """float32 weights ``scale * (code - 8)`` of a ``weight_packed`` (one scale per group of 32),
    unpacked and dequantized by the kernels' ``dequantize_int4``."""
    int4 = kernels_int4()
    shape = (int(packed.shape[0]), int(packed.shape[1]) * 8)
    return int4.dequantize_int4(int4.Int4Weight(packed, scales, None, shape, GROUP))


def unpermute_rows(rows: Any, n_head: int) -> Any:
    """Undo llama.cpp's q/k row permutation (transformers' GGUF loader does the same)."""
    half = rows.shape[0] // n_head // 2
    return rows.reshape(n_head, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def quantization_config(ignore: list[str]) -> dict[str, Any]:
    """compressed-tensors' ``quantization_config`` for Q4_0's codes: W4A16, symmetric, group 32."""
    weights = {"num_bits": BITS, "type": "int", "symmetric": True, "strategy": "group",
               "group_size": GROUP, "dynamic": False, "actorder": None, "block_structure": None,
               "observer": None, "observer_kwargs": {}}  # fmt: skip
    group = {"targets": ["Linear"], "weights": weights, "input_activations": None,
             "output_activations": None, "format": "pack-quantized"}  # fmt: skip
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": group},
        "ignore": sorted(ignore),
        "kv_cache_scheme": None,
    }


def hf_module(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj`` (the module, no ``.weight``)."""
    stem = gguf_name.removesuffix(".weight")
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
    if stem in TOP_NAMES and gguf_name.endswith(".weight"):
        return TOP_NAMES[stem]
    raise ScriptError(
        f"no Hugging Face name for the GGUF tensor {gguf_name}", "this script knows llama GGUFs"
    )


# --- reading, writing, checking ---------------------------------------------------------------


def default_paths(src: Path | None, twin: Path | None) -> tuple[Path, Path]:
    """The Q4_0 GGUF and its bf16 twin that ``evalgate setup --sglang-cpu`` made, unless given."""
    if src is not None and twin is not None:
        return src, twin
    try:
        from evalgate.engines.gguf import cache_dir, derived_gguf
        from evalgate.engines.llamacpp import find_binary
        from evalgate.engines.sglang import checkpoint_dir
    except ImportError as exc:
        raise ScriptError(
            f"evalgate is not importable ({exc}), so the default GGUF and twin cannot be found",
            "pass SRC.gguf and --twin DIR",
        ) from exc
    try:
        src = src or derived_gguf("int4", find_binary("llama-quantize"))
    except Exception as exc:  # evalgate's errors carry their own fix
        raise ScriptError(f"no Q4_0 GGUF: {exc}", getattr(exc, "fix", "") or "pass the GGUF path") from exc
    return src, twin or checkpoint_dir(cache_dir() / "sglang-cpu", "int4")


def check_twin(src: Path, twin: Path) -> None:
    """The twin must be a converted checkpoint, and (when it records one) of this very GGUF."""
    if not (twin / "config.json").is_file() or not (twin / "model.safetensors").is_file():
        raise ScriptError(
            f"{twin} is not a Hugging Face checkpoint (no config.json or model.safetensors)",
            "run `evalgate setup --sglang-cpu` (it converts the Q4_0 GGUF), or pass --twin",
        )
    stamp = twin / "evalgate-source.json"
    if stamp.is_file():
        recorded = json.loads(stamp.read_text()).get("gguf")
        if recorded and recorded != src.name:
            raise ScriptError(
                f"{twin} was converted from {recorded}, not {src.name}",
                "pass the twin of this GGUF (scripts/gguf_to_hf.py SRC.gguf)",
            )


def read_gguf(src: Path) -> tuple[Any, dict[str, Any]]:
    import gguf

    try:
        reader = gguf.GGUFReader(str(src))
    except Exception as exc:
        raise ScriptError(f"{src} is not a readable GGUF: {exc}", "pass a .gguf model file") from exc
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    if fields.get("general.architecture") != "llama":
        raise ScriptError(f"{src} is a {fields.get('general.architecture')!r} GGUF", "pass a llama GGUF")
    return reader, fields


def convert(src: Path, twin: Path, out: Path, scale_dtype: str) -> dict[str, Any]:
    """Write ``out`` from ``src``; return what went where (for the summary and the check)."""
    import gguf
    import torch
    from safetensors.torch import save_file

    reader, fields = read_gguf(src)
    heads = {"attn_q": int(fields["llama.attention.head_count"]),
             "attn_k": int(fields["llama.attention.head_count_kv"])}  # fmt: skip
    tensors: dict[str, Any] = {}
    packed: list[str] = []
    kept: dict[str, str] = {}
    for t in reader.tensors:
        module = hf_module(t.name)
        kind = t.name.split(".")[-2]
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_0 and not module.endswith(NOT_LINEAR + KEPT_LINEARS):
            codes, scales = q4_0_codes(t.data)
            if kind in heads:
                codes, scales = unpermute_rows(codes, heads[kind]), unpermute_rows(scales, heads[kind])
            rows, cols = codes.shape
            tensors[f"{module}.weight_packed"] = pack_codes(codes)
            scale = torch.from_numpy(np.ascontiguousarray(scales))
            tensors[f"{module}.weight_scale"] = scale.to(getattr(torch, scale_dtype))
            tensors[f"{module}.weight_shape"] = torch.tensor([rows, cols], dtype=torch.int64)
            packed.append(module)
            continue
        values = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        if kind in heads:
            values = unpermute_rows(values, heads[kind])
        tensors[f"{module}.weight"] = torch.from_numpy(np.array(values, copy=True)).to(torch.bfloat16)
        kept[module] = t.tensor_type.name
    ignore = [m for m in kept if not m.endswith(NOT_LINEAR)] + list(KEPT_LINEARS)
    config = json.loads((twin / "config.json").read_text())
    config["quantization_config"] = quantization_config(sorted(set(ignore)))
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (twin / name).is_file():
            shutil.copy2(twin / name, out / name)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {"packed": packed, "kept": kept, "ignore": config["quantization_config"]["ignore"]}


def check(out: Path, twin: Path, scale_dtype: str) -> str:
    """Read ``out`` back, unpack and dequantize it, and compare every weight with the twin's."""
    import torch
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        mine = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(str(twin / "model.safetensors"), "pt") as f:
        ref = {k: f.get_tensor(k) for k in f.keys()}
    problems: list[str] = []
    worst = worst_rel = 0.0
    unequal = 0
    for name, want in ref.items():
        module = name.removesuffix(".weight")
        if name in mine:
            got = mine[name]
        elif f"{module}.weight_packed" in mine:
            shape = tuple(mine[f"{module}.weight_shape"].tolist())
            packed = mine[f"{module}.weight_packed"]
            scales = mine[f"{module}.weight_scale"]
            if (packed.shape[0], packed.shape[1] * 8) != shape or scales.shape != (
                shape[0],
                shape[1] // GROUP,
            ):
                problems.append(
                    f"{module}: packed {tuple(packed.shape)}, scales {tuple(scales.shape)}, shape {shape}"
                )
                continue
            got = dequantize(packed, scales).to(torch.bfloat16)
        else:
            problems.append(f"{name} is missing")
            continue
        if got.shape != want.shape:
            problems.append(f"{name}: shape {tuple(got.shape)}, the twin's {tuple(want.shape)}")
            continue
        diff = (got.float() - want.float()).abs()
        worst = max(worst, float(diff.max()))
        worst_rel = max(worst_rel, float((diff / want.float().abs().clamp_min(1e-30)).max()))
        unequal += int((diff > 0).sum())
    extra = {k.rsplit(".", 1)[0] for k in mine} - {k.removesuffix(".weight") for k in ref}
    if extra:
        problems.append(f"modules the twin lacks: {sorted(extra)[:3]}")
    if scale_dtype == "float16" and unequal:
        problems.append(f"{unequal} weights differ from the twin's (max {worst:g}); float16 scales are exact")
    if worst_rel > BF16_SCALE_TOLERANCE:
        problems.append(
            f"a weight differs from the twin's by {worst_rel:.2%} (bfloat16 scales move a weight by at most 0.8%)"
        )
    fail_check(
        problems,
        f"the checkpoint in {out} disagrees with the twin {twin}",
        "check that the twin is this GGUF's (scripts/gguf_to_hf.py) and report it",
    )
    return (
        f"check: {len(ref)} tensors of the twin, {unequal} weights differ, max abs difference {worst:g}, "
        f"max relative {worst_rel:.3g} ({scale_dtype} scales)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = converter_parser(
        "Write a Q4_0 GGUF as a compressed-tensors W4A16 (pack-quantized, INT4 group 32) "
        "checkpoint that vLLM serves with its INT4 kernel; the codes are copied, not re-quantized.",
        "needs: numpy gguf torch safetensors. exit codes: 0 written and checked, "
        "2 missing packages or bad input, 3 the written checkpoint disagrees with the twin",
        src_help="Q4_0 GGUF (default: evalgate's derived Q4_0 GGUF)",
        out_help="output folder (default: <gguf without .gguf>-w4a16)",
    )
    p.add_argument("--twin", type=Path, help="the GGUF's bf16 HF twin (default: evalgate's Q4_0-hf)")
    p.add_argument(
        "--scale-dtype",
        choices=SCALE_DTYPES,
        default="bfloat16",
        help="weight_scale dtype: bfloat16 is what vLLM computes with (default); float16 is GGUF's own, "
        "exact, and vLLM narrows it on load",
    )
    return p.parse_args(argv)


def command(args: argparse.Namespace) -> Path:
    """The Q4_0 GGUF (given, or evalgate's) written as W4A16 into OUT_DIR and checked; returns OUT_DIR."""
    require(("numpy", "gguf", "torch", "safetensors"), INSTALL_FIX)
    src, twin = default_paths(args.src, args.twin)
    src, twin = src.resolve(), twin.resolve()
    if not src.is_file():
        raise ScriptError(f"{src} does not exist", "pass an existing Q4_0 .gguf file")
    check_twin(src, twin)
    out = args.out or out_beside(src, "-w4a16")
    print(f"converting {src} -> {out} (W4A16, {args.scale_dtype} scales; twin {twin})", flush=True)
    done = convert(src, twin, out, args.scale_dtype)
    if not done["packed"]:
        raise ScriptError(f"{src} has no Q4_0 linear weights", "pass the Q4_0 GGUF")
    kept = ", ".join(f"{m} ({k})" for m, k in done["kept"].items() if "layers." not in m)
    print(f"packed {len(done['packed'])} Q4_0 linears; kept 16-bit: {kept} and {len(done['kept'])} in all")
    print(f"ignore: {done['ignore']}")
    print(check(out, twin, args.scale_dtype))
    return out


def main(argv: list[str] | None = None) -> int:
    return run(command, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
