#!/usr/bin/env bash
# GPU smoke test: the CPU engine's SmolLM2, served by SGLang, bf16 against fp8kv, one command.
#
# Why this model: `evalgate setup` already derives its F16 GGUF for the CPU engine, and
# scripts/gguf_to_hf.py turns that GGUF into a safetensors checkpoint, so the GPU run needs no Hub
# download and serves the very model the CPU runs gate (docs/engines.md, "A GPU check in one command").
#
# Needs: an NVIDIA GPU, SGLang, evalgate with the [cpu] extra (llama-quantize derives the GGUFs),
# and transformers + gguf + accelerate for the conversion, all importable by $PYTHON.
# Takes a few minutes: two SGLang launches and the smoke preset (50 items per suite) on each.
#
# FP8 KV scales: the candidate gets `--quantization-param-path` with scales calibrated on this very
# checkpoint by scripts/kv_scales.py (evalgate.kernels.fp8_kv: per-layer amax of K and V over the
# ARC-Easy and GSM8K train questions, x 1.2 headroom, / 448), kept beside it; without them SGLang
# would run FP8 KV at scale 1.0. The scale SGLang really used is read back from its log and printed.
#
# Environment: PYTHON (default python; the config written below makes the engine launch SGLang
# with the same interpreter), OUT (run folder, default reports/gpu-smoke-<UTC time>), DATA_DIR
# (default ../shared/data), HF_DIR (checkpoint folder, default beside the F16 GGUF in
# $EVALGATE_CACHE/models/<hash>/, where gguf_to_hf.py puts it too), KV_SCALES (scale file,
# default $HF_DIR/kv_scales.json, calibrated when missing). Relative paths are taken from
# the repository root, where the script runs. Extra arguments go to `evalgate compare`, e.g.
# --suites arc_easy. Exit code: evalgate's (0 PASS, 1 BLOCK, 2 usage, 3 infrastructure), or 2 when
# a prerequisite is missing.
set -euo pipefail

die() {
    printf 'error: %s\nfix: %s\n' "$1" "$2" >&2
    exit 2
}

# Prerequisites first, with shell builtins only, so a bare machine gets a clear message.
command -v nvidia-smi >/dev/null 2>&1 \
    || die "nvidia-smi is not on PATH: this smoke test needs an NVIDIA GPU and its driver" \
        "run it on a GPU machine (the CPU path is: evalgate compare --engine llamacpp)"
gpus=$(nvidia-smi -L 2>&1) || die "nvidia-smi failed: ${gpus}" "check the NVIDIA driver (nvidia-smi -L)"
[[ "$gpus" == *GPU* ]] || die "nvidia-smi lists no GPU" "check CUDA_VISIBLE_DEVICES and the driver"
PYTHON=${PYTHON:-python}
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON is not on PATH" "set PYTHON to the interpreter with evalgate and SGLang"
"$PYTHON" -c "import sglang" >/dev/null 2>&1 \
    || die "$PYTHON cannot import sglang" "pip install 'evalgate[sglang]' (or: pip install sglang) into that environment"
"$PYTHON" -c "import evalgate" >/dev/null 2>&1 \
    || die "$PYTHON cannot import evalgate" "pip install -e '.[cpu,sglang]' from the evalgate checkout"

script_dir=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
cd "$script_dir/.."
printf '%s\n' "$gpus"
"$PYTHON" -c "from importlib.metadata import version; print('sglang', version('sglang'))" 2>/dev/null \
    || echo "sglang (no package metadata)"

cache=${EVALGATE_CACHE:-$HOME/.cache/evalgate}
export EVALGATE_CACHE=$cache
OUT=${OUT:-reports/gpu-smoke-$(date -u +%Y%m%dT%H%M%SZ)}
DATA_DIR=${DATA_DIR:-../shared/data}

echo "== evalgate setup (derives the GGUFs once; later runs reuse them)"
"$PYTHON" -m evalgate setup

gguf=$("$PYTHON" -c "from evalgate.engines.llamacpp import find_binary
from evalgate.engines.gguf import derived_gguf
print(derived_gguf('bf16', find_binary('llama-quantize')))")
# beside the GGUF by default: its folder is keyed by the source hash, so a new source never reuses it
HF_DIR=${HF_DIR:-${gguf%.gguf}-hf}
if [[ -f "$HF_DIR/config.json" && -f "$HF_DIR/model.safetensors" ]]; then
    echo "== checkpoint present: $HF_DIR"
else
    echo "== converting $gguf into $HF_DIR"
    "$PYTHON" scripts/gguf_to_hf.py "$gguf" "$HF_DIR" --dtype bfloat16
fi
HF_DIR=$(cd "$HF_DIR" && pwd)  # the config must not depend on the directory SGLang starts in

KV_SCALES=${KV_SCALES:-$HF_DIR/kv_scales.json}
if [[ -f "$KV_SCALES" ]]; then
    echo "== KV scales present: $KV_SCALES"
else
    echo "== calibrating FP8 KV scales into $KV_SCALES"
    "$PYTHON" scripts/kv_scales.py "$HF_DIR" "$KV_SCALES" --data-dir "$DATA_DIR"
fi

config=$(mktemp "${TMPDIR:-/tmp}/evalgate-gpu-smoke.XXXXXX")
trap 'rm -f "$config"' EXIT
# [sglang] model_path, kv_scales_path (the fp8kv arm only; checked before launch), and python: the
# interpreter checked above is the one that launches SGLang. Everything else stays at the engine's
# defaults. A JSON string is a valid TOML basic string, which keeps odd characters in paths safe.
"$PYTHON" -c 'import json, sys
print("[sglang]\nmodel_path = " + json.dumps(sys.argv[1]) + "\nkv_scales_path = " + json.dumps(sys.argv[2])
      + "\npython = " + json.dumps(sys.executable))' \
    "$HF_DIR" "$KV_SCALES" >"$config"
cat "$config"

echo "== evalgate compare --engine sglang --baseline bf16 --candidate fp8kv --preset smoke -> $OUT"
rc=0
"$PYTHON" -m evalgate compare --engine sglang --baseline bf16 --candidate fp8kv --preset smoke \
    --config "$config" --data-dir "$DATA_DIR" --out "$OUT" "$@" || rc=$?

"$PYTHON" - "$OUT" <<'EOF' || true
"""Print the verdict, both arms' KV capacity (SGLang's max_total_num_tokens) and the KV scale used."""
import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
verdict = run / "verdict.json"
if verdict.exists():
    v = json.loads(verdict.read_text())
    print(f"verdict: {v.get('verdict')} ({v.get('reason', '')})")
else:
    print(f"verdict: none ({verdict} was not written)")
manifest = run / "manifest.json"
arms = json.loads(manifest.read_text()).get("arms", {}) if manifest.exists() else {}
for arm in ("baseline", "candidate"):
    server = (arms.get(arm) or {}).get("server") or {}
    tokens = server.get("max_total_num_tokens", "not recorded")
    print(f"{arm:9} kv_cache_dtype={server.get('kv_cache_dtype', '?')} max_total_num_tokens={tokens}")
    scales = server.get("kv_scales")
    if scales:  # read back from SGLang's log: "file", or "1.0" when it fell back
        print(f"{arm:9} kv scale used: {scales.get('scale')} ({scales.get('file') or 'no file'}: {scales.get('log')})")
EOF
echo "report: $OUT/report.html  (exit code $rc)"
exit "$rc"
