"""Make an lm-eval ``--log_samples`` run on the CPU engine, with lm-eval's own CLI.

It launches llama-server for one variant through evalgate's launcher (the flags ``evalgate
compare`` uses), points lm-eval's command line at it (``python -m evalgate.lmeval run --model
evalgate``, the API key passed in the environment so lm-eval's results JSON never holds it), and
leaves lm-eval's output folder. Local data: each task's YAML is lm-eval's own, included with its
dataset pointed at ``--data-dir`` (the Hub is not needed). ``--items-from RUN`` takes exactly the
items an ``evalgate compare`` run scored (lm-eval's ``--samples``), so the import can be checked
against the live comparison item by item::

    python scripts/lmeval_samples.py --variant bf16 --tasks arc_easy --limit 200 --out A --data-dir ../shared/data
    python scripts/lmeval_samples.py --variant int4 --tasks arc_easy --limit 200 --out B --data-dir ../shared/data
    evalgate compare --baseline-samples A --candidate-samples B
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.config import LlamaCppConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.store.manifest import load_manifest
from evalgate.suites import SuiteOptions, default_registry
from evalgate.suites._lmeval import LmEvalSuite, Member, lm_eval_task_dir, lmeval_tasks
from evalgate.variants import LaunchSpec, parse_variant


def _members(tasks: list[str]) -> dict[str, tuple[LmEvalSuite, Member]]:
    known = lmeval_tasks(default_registry())
    missing = [t for t in tasks if t not in known]
    if missing:
        raise SystemExit(f"no evalgate suite runs {', '.join(missing)}; this script knows {sorted(known)}")
    return {t: known[t] for t in tasks}


def write_local_tasks(tasks: list[str], data_dir: Path, folder: Path) -> None:
    """One YAML per task: lm-eval's own (``include``), its dataset read from ``data_dir``."""
    for task, (_, m) in _members(tasks).items():
        if m.local.row_filter:
            raise SystemExit(f"{task} filters rows of a shared file; run it from the Hub instead")
        files = {split: str((data_dir / rel).resolve()) for split, rel in m.local.files}
        overrides = dict(m.overrides)
        lines = [
            f"include: {lm_eval_task_dir() / m.yaml}",
            f"task: {task}",
            "dataset_path: json",
            "dataset_name: null",
            f"dataset_kwargs: {json.dumps({'data_files': files})}",
        ] + [f"{k}: {json.dumps(v)}" for k, v in overrides.items()]
        (folder / f"{task}.yaml").write_text("\n".join(lines) + "\n")


def sample_indices(run: Path, tasks: list[str], data_dir: Path | None) -> dict[str, list[int]]:
    """The document indices of the items an evalgate run scored, per lm-eval task."""
    manifest = load_manifest(run)
    options = SuiteOptions(data_dir=data_dir, seed=manifest.request.seed)
    out: dict[str, list[int]] = {}
    for task, (suite, m) in _members(tasks).items():
        wanted = set(manifest.suites[suite.name].item_ids)
        for i, doc in enumerate(suite.task(options, m).eval_docs):
            if suite.item_key(m, doc, i) in wanted:
                out.setdefault(task, []).append(i)
    return out


def run_lmeval(
    engine: LlamaCppEngine, spec: LaunchSpec, variant: str, tmp: str, tasks: str, out: Path, extra: list[str]
) -> int:
    """Launch ``spec`` and run lm-eval's CLI with evalgate's model against it (the tasks' yaml under
    ``tmp``, samples logged to ``out``); lm-eval's exit code. make_rolling_fixture.py uses it too."""
    with engine.launch(spec, LaunchSlot(variant, Path(tmp) / "logs")) as handle:
        cmd = [
            sys.executable, "-m", "evalgate.lmeval", "run", "--model", "evalgate",
            "--model_args", f"base_url={handle.base_url},concurrency={engine.slots}",
            "--tasks", tasks, "--include_path", tmp, "--log_samples", "--output_path", str(out), *extra,
        ]  # fmt: skip
        print("+", " ".join(cmd), flush=True)
        env = {**os.environ, "EVALGATE_API_KEY": handle.api_key, "HF_DATASETS_OFFLINE": "1"}
        return subprocess.run(cmd, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", required=True, help="bf16, fp8kv, int4, ... (as evalgate compare)")
    ap.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    ap.add_argument("--out", type=Path, required=True, help="lm-eval's --output_path")
    ap.add_argument("--data-dir", type=Path, required=True, help="local splits (../shared/data)")
    ap.add_argument("--limit", type=int, help="lm-eval --limit (the first N documents)")
    ap.add_argument("--items-from", type=Path, help="an evalgate run folder: score exactly its items")
    ap.add_argument(
        "--deterministic", action="store_true", help="one slot, no prompt cache (as compare's flag)"
    )
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    engine = LlamaCppEngine(LlamaCppConfig(deterministic=args.deterministic))
    spec = engine.launch_spec(parse_variant(args.variant))
    with tempfile.TemporaryDirectory() as tmp:
        write_local_tasks(tasks, args.data_dir, Path(tmp))
        select = (
            ["--samples", json.dumps(sample_indices(args.items_from, tasks, args.data_dir))]
            if args.items_from
            else ["--limit", str(args.limit)]
            if args.limit
            else []
        )
        return run_lmeval(engine, spec, args.variant, tmp, ",".join(tasks), args.out, select)


if __name__ == "__main__":
    raise SystemExit(main())
