"""Make tests/fixtures/lmeval/rolling/: a perplexity (``loglikelihood_rolling``) run of lm-eval's own
CLI on the CPU engine, for one variant.

The task is lm-eval's own wikitext task (``include:`` of its ``tasks/wikitext/wikitext.yaml``, so
``doc_to_target`` is its ``wikitext_detokenizer`` and ``process_results`` its own, which logs
``word_perplexity``/``byte_perplexity``/``bits_per_byte`` as ``[loglik, count]`` pairs) with only
the dataset replaced: the first ``--docs`` GSM8K train problems (question, a newline, the worked
solution with its ``<<a*b=c>>`` calculator notes removed; the Hub's wikitext is not reachable
here), one document each, in the ``page`` field wikitext reads. llama-server is launched for the
variant through evalgate's launcher (the flags ``evalgate compare`` uses) and lm-eval is run as
``python -m evalgate.lmeval run --model evalgate ... --log_samples``::

    python scripts/make_rolling_fixture.py --variant bf16 --out tests/fixtures/lmeval/rolling/bf16
    python scripts/make_rolling_fixture.py --variant int4 --out tests/fixtures/lmeval/rolling/int4
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lm_eval

from evalgate.config import LlamaCppConfig
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.variants import parse_variant
from scripts.lmeval_samples import run_lmeval

TASK = "rolling_gsm8k"
WIKITEXT_YAML = Path(lm_eval.__file__).parent / "tasks" / "wikitext" / "wikitext.yaml"


def documents(train: Path, n: int) -> list[dict[str, str]]:
    """The first ``n`` GSM8K train problems as wikitext-like pages."""
    out = []
    for line in train.read_text(encoding="utf-8").splitlines()[:n]:
        row = json.loads(line)
        solution = re.sub(r"<<[^>]*>>", "", row["answer"]).replace("\n#### ", "\nThe answer is ")
        out.append({"page": f"{row['question']}\n{solution}\n"})
    return out


def write_task(folder: Path, data_dir: Path, n: int) -> None:
    docs = folder / "documents.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in documents(data_dir / "gsm8k" / "train.jsonl", n)))
    lines = [
        f"include: {WIKITEXT_YAML}",
        f"task: {TASK}",
        "dataset_path: json",
        "dataset_name: null",
        f"dataset_kwargs: {json.dumps({'data_files': {'test': str(docs)}})}",
        "training_split: null",
        "validation_split: null",
        "test_split: test",
    ]
    (folder / f"{TASK}.yaml").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", required=True, help="bf16, int4, ... (as evalgate compare)")
    ap.add_argument("--out", type=Path, required=True, help="lm-eval's --output_path")
    ap.add_argument(
        "--data-dir", type=Path, default=Path("/work/shared/data"), help="holds gsm8k/train.jsonl"
    )
    ap.add_argument("--docs", type=int, default=36, help="documents (GSM8K train problems)")
    args = ap.parse_args(argv)
    engine = LlamaCppEngine(LlamaCppConfig())
    spec = engine.launch_spec(parse_variant(args.variant))
    with tempfile.TemporaryDirectory() as tmp:
        write_task(Path(tmp), args.data_dir, args.docs)
        return run_lmeval(engine, spec, args.variant, tmp, TASK, args.out, [])


if __name__ == "__main__":
    raise SystemExit(main())
