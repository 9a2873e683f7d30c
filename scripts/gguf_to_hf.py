#!/usr/bin/env python
"""Turn the SmolLM2 GGUF into a safetensors Hugging Face checkpoint, so SGLang serves the same model.

The CPU engine (llama.cpp) runs the F16 GGUF that ``evalgate setup`` derives; a GPU engine needs a
Hugging Face folder. transformers (with ``gguf``) dequantizes the GGUF and ``save_pretrained`` writes
safetensors. What it writes depends on the transformers version, so the result is normalised to
one checkpoint that SGLang on transformers 4.x and 5.x both load (docs/engines.md, "A GPU check in one command"):

- ``config.json``: a top-level ``rope_theta`` and ``torch_dtype`` (5.x nests the first under
  ``rope_parameters`` and renames the second ``dtype``), and no ``quantization_config``, which
  would make the folder look quantized.
- ``tokenizer_config.json``, rewritten from the GGUF: a ``tokenizer_class`` both know
  (``PreTrainedTokenizerFast`` loads ``tokenizer.json`` as written), the GGUF's special tokens and
  ``add_bos_token``/``add_eos_token``, no clean-up of spaces, ``model_input_names`` without
  ``token_type_ids``, and the chat template (5.x keeps it only in a .jinja file).
- ``tokenizer.json``: BOS/EOS added exactly as the GGUF says, and for a byte-level BPE vocabulary
  (SmolLM2's) a byte-level decoder. transformers 4.x builds a Llama tokenizer from any llama GGUF:
  it prepends ``<|im_start|>`` to every prompt and saves the whole GGUF again as tokenizer.model.

Then the saved tokenizer is reloaded and checked against the GGUF's vocabulary and BOS setting.

Usage: ``python scripts/gguf_to_hf.py [SRC.gguf [OUT_DIR]] [--dtype bfloat16]``. Without SRC it
converts the F16 GGUF that ``evalgate setup`` derived; without OUT_DIR it writes beside the GGUF.
Exit codes: 0 written and checked, 2 missing packages or bad input, 3 the check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package; `python -I` leaves it off

from _gguf_cli import ScriptError, converter_parser, fail_check, out_beside, require, run

DTYPES = ("bfloat16", "float16", "float32")
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
INSTALL_FIX = "pip install transformers gguf accelerate  (into the environment that runs this script)"
BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
ROUND_TRIP = ("Hello world", " leading space", "a , b . c ! don 't", "naïve café 日本語 🤖", "one\ntwo\t3.14")


@dataclass(frozen=True)
class GgufTokenizer:
    """The GGUF's own tokenizer settings: what llama.cpp does, so what the checkpoint must do."""

    model: str
    """``tokenizer.ggml.model``: gpt2 is byte-level BPE (SmolLM2), llama is SentencePiece."""
    tokens: list[str]
    add_bos: bool | None
    """None when the GGUF does not say; transformers' choice is then kept."""
    add_eos: bool
    """False when the GGUF does not say, as llama.cpp assumes for BPE and SentencePiece."""
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None = None
    pad_id: int | None = None

    def specials(self) -> dict[str, int]:
        """``bos_token`` etc. -> id, for the special tokens the GGUF names."""
        named = (
            ("bos_token", self.bos_id),
            ("eos_token", self.eos_id),
            ("unk_token", self.unk_id),
            ("pad_token", self.pad_id),
        )
        return {name: int(i) for name, i in named if i is not None and 0 <= int(i) < len(self.tokens)}


def default_source() -> Path:
    """The F16 GGUF ``evalgate setup`` derived (the ``bf16`` weights of the CPU engine)."""
    try:
        from evalgate.engines.gguf import derived_gguf
        from evalgate.engines.llamacpp import find_binary
    except ImportError as exc:
        raise ScriptError(
            f"evalgate is not importable ({exc}), so the default GGUF cannot be found",
            "pass the GGUF path as the first argument, or pip install -e . in the evalgate checkout",
        ) from exc
    try:
        return derived_gguf("bf16", find_binary("llama-quantize"))
    except Exception as exc:  # evalgate's errors carry their own fix
        raise ScriptError(
            f"no derived F16 GGUF: {exc}",
            getattr(exc, "fix", "") or "run `evalgate setup` first, or pass the GGUF path",
        ) from exc


def import_transformers() -> tuple[Any, Any, Any]:
    """(transformers, torch, GgufConfig or None), or a ScriptError that says what to install."""
    require(("torch", "transformers", "gguf", "accelerate"), INSTALL_FIX)  # accelerate: GGUF loading
    import torch
    import transformers

    # transformers >= 5.x keeps GGUF weights packed unless asked; older ones always dequantize
    gguf_config = getattr(transformers, "GgufConfig", None)
    return transformers, torch, gguf_config


def read_gguf_tokenizer(src: Path) -> GgufTokenizer:
    """Tokenizer settings from the GGUF header (memory-mapped; the tensors are not read)."""
    import gguf

    try:
        fields = gguf.GGUFReader(str(src)).fields
    except Exception as exc:
        raise ScriptError(f"{src} is not a readable GGUF: {exc}", "pass a .gguf model file") from exc

    def value(key: str) -> Any:
        field = fields.get(key)
        if field is None:
            return None
        if hasattr(field, "contents"):
            return field.contents()
        parts = [field.parts[i] for i in field.data]  # gguf < 0.11 has no contents()
        if field.types[-1] == gguf.GGUFValueType.STRING:
            strings = [bytes(p).decode("utf-8") for p in parts]
            return strings if field.types[0] == gguf.GGUFValueType.ARRAY else strings[0]
        items = [p.tolist()[0] for p in parts]
        return items if field.types[0] == gguf.GGUFValueType.ARRAY else items[0]

    add_bos, add_eos = value("tokenizer.ggml.add_bos_token"), value("tokenizer.ggml.add_eos_token")
    return GgufTokenizer(
        model=str(value("tokenizer.ggml.model") or ""),
        tokens=list(value("tokenizer.ggml.tokens") or []),
        add_bos=None if add_bos is None else bool(add_bos),
        add_eos=bool(add_eos),
        bos_id=value("tokenizer.ggml.bos_token_id"),
        eos_id=value("tokenizer.ggml.eos_token_id"),
        unk_id=value("tokenizer.ggml.unknown_token_id"),
        pad_id=value("tokenizer.ggml.padding_token_id"),
    )


def convert(src: Path, out: Path, dtype: str) -> None:
    """Load ``src`` with transformers, save it to ``out``, normalise it, and check the tokenizer."""
    transformers, torch, gguf_config = import_transformers()
    meta = read_gguf_tokenizer(src)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    kwargs: dict[str, Any] = {"gguf_file": src.name, dtype_key: getattr(torch, dtype)}
    if gguf_config is not None:
        kwargs["quantization_config"] = gguf_config(dequantize=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(src.parent), **kwargs)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out), legacy_format=False)  # tokenizer.json only, no slow files
    stray = out / "tokenizer.model"
    if stray.exists() and stray.read_bytes()[:4] == b"GGUF":  # 4.x copies the GGUF as its "vocab"
        stray.unlink()
    fix_config(out / "config.json", dtype)
    fix_tokenizer_config(out, tokenizer, meta)
    fix_tokenizer_json(out / "tokenizer.json", tokenizer, meta)
    print(check_tokenizer(out, meta, transformers))


def fix_config(path: Path, dtype: str) -> None:
    """Top-level ``rope_theta`` and ``torch_dtype`` for transformers 4.x; no GGUF quantization record."""
    config = json.loads(path.read_text())
    config.pop("quantization_config", None)
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = config.get("rope_theta", rope.get("rope_theta"))
    if theta is None:
        raise ScriptError(f"{path} has no rope_theta", "check that the GGUF is a llama-architecture model")
    config["rope_theta"] = theta
    config["torch_dtype"] = config.get("torch_dtype") or config.get("dtype") or dtype
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def fix_tokenizer_config(out: Path, tokenizer: Any, meta: GgufTokenizer) -> None:
    """Rewrite ``tokenizer_config.json`` from the GGUF rather than patch what transformers saved.

    The versions save different and partly wrong keys (4.x: ``eos_token`` ``<|im_start|>``,
    clean-up of spaces on, a Llama class), so only the added-token table is kept from them."""
    path = out / "tokenizer_config.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    template = getattr(tokenizer, "chat_template", None)
    jinja = out / "chat_template.jinja"
    if not template and jinja.exists():
        template = jinja.read_text()
    if not template:
        raise ScriptError("the GGUF carries no chat template", "use a GGUF with tokenizer.chat_template")
    config: dict[str, Any] = {k: saved[k] for k in ("added_tokens_decoder",) if k in saved}
    config["tokenizer_class"] = TOKENIZER_CLASS
    # PreTrainedTokenizerFast would also return token_type_ids, which a llama's generate() refuses
    config["model_input_names"] = ["input_ids", "attention_mask"]
    # with clean-up, decode turns "a , b" into "a, b"; llama.cpp does not
    config["clean_up_tokenization_spaces"] = False
    config["chat_template"] = template
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if name in saved:
            config[name] = saved[name]
    config.update({name: meta.tokens[tid] for name, tid in meta.specials().items()})
    # 5.x rebuilds the post-processor from these when present, so they must say what llama.cpp does
    if meta.add_bos is not None:
        config["add_bos_token"], config["add_eos_token"] = meta.add_bos, meta.add_eos
    model_config = out / "config.json"
    context = (
        json.loads(model_config.read_text()).get("max_position_embeddings") if model_config.exists() else None
    )
    if isinstance(context, int):
        config["model_max_length"] = context
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # 4.x reads special_tokens_map.json over tokenizer_config.json, and it repeats the wrong EOS
    (out / "special_tokens_map.json").unlink(missing_ok=True)


def fix_tokenizer_json(path: Path, tokenizer: Any, meta: GgufTokenizer) -> None:
    """BOS/EOS as the GGUF adds them, and a byte-level decoder for a byte-level BPE vocabulary."""
    data = json.loads(path.read_text())
    if meta.model == "gpt2":
        data["decoder"] = dict(BYTE_LEVEL_DECODER)
    if meta.add_bos is not None:
        ends = {  # token text -> id, in order: BOS first
            tokenizer.convert_ids_to_tokens(int(tid)): int(tid)
            for flag, tid in ((meta.add_bos, meta.bos_id), (meta.add_eos, meta.eos_id))
            if flag and tid is not None
        }
        data["post_processor"] = template_processing(ends, bos_first=meta.add_bos and meta.bos_id is not None)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def template_processing(ends: dict[str, int], *, bos_first: bool) -> dict[str, Any]:
    """A tokenizers ``TemplateProcessing`` that wraps each sequence in the given BOS and/or EOS."""
    texts = list(ends)
    bos, eos = (texts[:1], texts[1:]) if bos_first else ([], texts)

    def seq(name: str, type_id: int) -> list[dict[str, Any]]:
        before = [{"SpecialToken": {"id": t, "type_id": type_id}} for t in bos]
        after = [{"SpecialToken": {"id": t, "type_id": type_id}} for t in eos]
        return [*before, {"Sequence": {"id": name, "type_id": type_id}}, *after]

    return {
        "type": "TemplateProcessing",
        "single": seq("A", 0),
        "pair": seq("A", 0) + seq("B", 1),
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in ends.items()},
    }


def check_tokenizer(out: Path, meta: GgufTokenizer, transformers: Any) -> str:
    """Reload the saved tokenizer: same vocabulary as the GGUF, same BOS rule, exact round trips."""
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    problems = []
    if meta.tokens and tok.convert_ids_to_tokens(list(range(len(meta.tokens)))) != meta.tokens:
        problems.append("its id -> token table differs from the GGUF's")
    for name, tid in meta.specials().items():
        if getattr(tok, f"{name}_id", None) != tid:
            problems.append(f"its {name} is {getattr(tok, name, None)!r}, the GGUF's is {meta.tokens[tid]!r}")
    ids = tok("Hello world")["input_ids"]
    if meta.add_bos is not None and (bool(ids) and ids[0] == meta.bos_id) != meta.add_bos:
        problems.append(f"it {'omits' if meta.add_bos else 'adds'} BOS, the GGUF does the opposite ({ids})")
    for text in ROUND_TRIP:
        back = tok.decode(tok(text, add_special_tokens=False)["input_ids"])
        if back != text:
            problems.append(f"{text!r} decodes back as {back!r}")
    if "Hello" not in tok.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False):
        problems.append("its chat template does not render the message")
    fail_check(
        problems,
        f"the saved tokenizer in {out} disagrees with the GGUF",
        "report it with the transformers version; the checkpoint would not serve the CPU engine's model",
    )
    return (
        f"tokenizer check: {len(meta.tokens)} tokens equal to the GGUF's, BOS added: {meta.add_bos}, "
        f"{len(ROUND_TRIP)} round trips exact (transformers {transformers.__version__})"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = converter_parser(
        "Convert a GGUF (default: the F16 SmolLM2 from `evalgate setup`) into a safetensors "
        "Hugging Face checkpoint that SGLang loads.",
        "needs: pip install transformers gguf accelerate (and torch). exit codes: 0 written, "
        "2 missing packages or bad input, 3 the saved tokenizer disagrees with the GGUF",
        src_help="GGUF file (default: evalgate's derived F16 GGUF)",
        out_help="output folder (default: <gguf without .gguf>-hf)",
    )
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="weights dtype (default bfloat16)")
    return p.parse_args(argv)


def command(args: argparse.Namespace) -> Path:
    """The GGUF (given, or evalgate's derived F16 one) converted into OUT_DIR; returns OUT_DIR."""
    import_transformers()  # fail before the slow default-source lookup
    src = (args.src or default_source()).resolve()
    if not src.is_file():
        raise ScriptError(f"{src} does not exist", "pass an existing .gguf file, or run `evalgate setup`")
    out = args.out or out_beside(src, "-hf")
    print(f"converting {src} -> {out} ({args.dtype})", flush=True)
    convert(src, out, args.dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    return run(command, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
