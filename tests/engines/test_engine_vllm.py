"""The vLLM engine without a GPU: variant flags, the fairness check on them, the launcher against a
scripted stand-in process, log diagnosis from real vLLM logs, and the KV pool read from a real log.
Every flag is checked against vLLM's own parser in test_vllm_parser.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalgate.config import VLLMConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.vllm import QUANT_KEYS, VLLMEngine, diagnose, vllm_capacity, wait_for_group_exit
from evalgate.engines.vllm._engine import _group_members
from evalgate.errors import ConfigError, ServerStartError
from evalgate.variants import Variant, check_only_quantization, parse_variant

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "vllm_logs"
BASE = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def models(tmp_path: Path) -> dict[str, str]:
    """Local checkpoint folders holding only the config.json the engine reads."""
    configs = {
        "bf16": {},
        "fp8": {"quantization_config": {"quant_method": "fp8"}},
        "awq": {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
        "ct_w4": {
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128}}},
            }
        },
        "ct_w8": {
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8}}},
            }
        },
    }
    out = {}
    for name, config in configs.items():
        folder = tmp_path / f"ckpt-{name}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], **config}))
        out[name] = str(folder)
    return out


def engine(**kw: object) -> VLLMEngine:
    return VLLMEngine(VLLMConfig(**{"model": BASE, "launch_command": ["vllm", "serve"], **kw}))


def spec_of(name: str, model: str | None = None, **kw: object) -> dict[str, str | None]:
    v = parse_variant(name)
    spec = engine(**kw).launch_spec(Variant(v.name, v.weights, v.kv, model))
    return {"model": spec.model, **dict(spec.args)}


# -- variant -> flags ----------------------------------------------------------------------------------
def test_bf16_is_bfloat16_with_an_explicit_bfloat16_kv_cache() -> None:
    args = spec_of("bf16")
    assert args["model"] == BASE and args["--dtype"] == "bfloat16"
    assert args["--kv-cache-dtype"] == "bfloat16" and "--quantization" not in args  # #18.4: not auto
    assert args["--tensor-parallel-size"] == "1" and args["--seed"] == "1234"
    assert args["--generation-config"] == "vllm"  # checkpoints' generation_config.json stay out


def test_fp8kv_sets_an_e4m3_cache() -> None:
    args = spec_of("fp8kv")
    assert args["--kv-cache-dtype"] == "fp8_e4m3" and "--quantization" not in args


def test_fp8_quantizes_online_unless_the_checkpoint_is_quantized(models: dict[str, str]) -> None:
    assert spec_of("fp8")["--quantization"] == "fp8"
    assert spec_of("fp8", models["bf16"])["--quantization"] == "fp8"
    assert "--quantization" not in spec_of("fp8", models["fp8"])
    assert "--quantization" not in spec_of(
        "fp8", "RedHatAI/Llama-3.1-8B-Instruct-FP8"
    )  # a Hub FP8 checkpoint


def test_int4_needs_an_explicit_int4_checkpoint() -> None:
    with pytest.raises(ConfigError, match="needs an INT4 checkpoint") as err:
        spec_of("int4")
    assert "[variants.int4] model" in err.value.fix


@pytest.mark.parametrize("key", ["awq", "ct_w4"])
def test_int4_reads_the_method_from_config_json(models: dict[str, str], key: str) -> None:
    args = spec_of("int4", models[key])
    assert args["model"] == models[key] and "--quantization" not in args


@pytest.mark.parametrize(("key", "message"), [("bf16", "no quantization_config"), ("ct_w8", "not a 4-bit")])
def test_int4_refuses_a_checkpoint_that_is_not_4_bit(models: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec_of("int4", models[key])


def test_int4_plus_fp8kv_composes(models: dict[str, str]) -> None:
    args = spec_of("int4+fp8kv", models["awq"])
    assert args["model"] == models["awq"] and args["--kv-cache-dtype"] == "fp8_e4m3"
    assert "--quantization" not in args


def test_a_quantized_baseline_and_a_missing_model_are_refused(models: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="points at a quantized checkpoint"):
        spec_of("bf16", models["fp8"])
    with pytest.raises(ConfigError, match="needs a model checkpoint"):
        VLLMEngine(VLLMConfig()).launch_spec(parse_variant("bf16"))


def test_settings_become_flags_and_variant_args_override() -> None:
    settings = {"gpu_memory_utilization": 0.85, "max_model_len": 8192, "tool_call_parser": "llama3_json"}
    args = spec_of("bf16", **settings)
    assert args["--gpu-memory-utilization"] == "0.85" and args["--max-model-len"] == "8192"
    assert args["--enable-auto-tool-choice"] is None and args["--tool-call-parser"] == "llama3_json"
    spec = engine(**settings).launch_spec(Variant("long", args=(("--max-model-len", "16384"),)))
    assert dict(spec.args)["--max-model-len"] == "16384"


# -- the only-quantization rule on real flag sets -----------------------------------------------------
@pytest.mark.parametrize("candidate", ["fp8kv", "fp8", "int4", "int4+fp8kv"])
def test_each_variant_against_bf16_is_a_fair_pair(models: dict[str, str], candidate: str) -> None:
    eng = engine(tool_call_parser="hermes", max_model_len=8192)
    v = parse_variant(candidate)
    cand = eng.launch_spec(Variant(v.name, v.weights, v.kv, models["awq"] if v.weights == "int4" else None))
    assert check_only_quantization(eng.launch_spec(parse_variant("bf16")), cand) == []


def test_kernel_backends_and_gpu_placement_may_differ() -> None:
    eng = engine()
    base = eng.launch_spec(Variant("bf16", env=(("CUDA_VISIBLE_DEVICES", "0"),)))
    kernels = Variant(
        "fp8kv-flashinfer",
        kv="fp8",
        args=(("--attention-backend", "FLASHINFER"), ("--moe-backend", "triton")),
        env=(("VLLM_ATTENTION_BACKEND", "FLASHINFER"), ("CUDA_VISIBLE_DEVICES", "1")),
    )
    assert check_only_quantization(base, eng.launch_spec(kernels)) == []
    assert {"env:VLLM_ATTENTION_BACKEND", "env:CUDA_VISIBLE_DEVICES", "--kv-cache-dtype"} <= QUANT_KEYS


@pytest.mark.parametrize(
    ("key", "value"),
    [("--max-model-len", "4096"), ("--seed", "1"), ("--tool-call-parser", "hermes"), ("--dtype", "float16")],
)
def test_other_differences_are_refused(key: str, value: str) -> None:
    eng = engine()
    diffs = check_only_quantization(
        eng.launch_spec(parse_variant("bf16")),
        eng.launch_spec(Variant("odd", kv="fp8", args=((key, value),))),
    )
    assert [d[0] for d in diffs] == [key]
    env = eng.launch_spec(Variant("v0", env=(("VLLM_USE_V1", "0"),)))
    assert [d[0] for d in check_only_quantization(eng.launch_spec(parse_variant("bf16")), env)] == [
        "env:VLLM_USE_V1"
    ]


# -- launching -----------------------------------------------------------------------------------------
def test_command_is_vllm_serve_with_loopback_and_key() -> None:
    eng = engine()
    spec = eng.launch_spec(parse_variant("fp8kv"))
    cmd = eng.command(spec, port=8123, api_key="eg-k")
    assert cmd[:9] == ["vllm", "serve", BASE, "--host", "127.0.0.1", "--port", "8123", "--api-key", "eg-k"]
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert eng.command(spec, port=8123, api_key="eg-k") is not cmd


def test_gpus_are_assigned_per_arm_and_must_cover_tensor_parallel(tmp_path: Path) -> None:
    eng = engine(gpus="0,1", arm_gpus={"candidate": "2,3"}, tensor_parallel_size=2)
    assert eng.gpus_for("baseline") == "0,1" and eng.gpus_for("candidate") == "2,3"
    narrow = engine(gpus="0", tensor_parallel_size=2)
    with (
        pytest.raises(ConfigError, match="fewer than tensor_parallel_size"),
        narrow.launch(narrow.launch_spec(parse_variant("bf16")), LaunchSlot("baseline", tmp_path)),
    ):
        pass


def test_version_asks_the_configured_interpreter(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 0.33.0\n")
    fake.chmod(0o755)
    assert VLLMEngine(VLLMConfig(python=str(fake))).version() == "0.33.0"
    assert VLLMEngine(VLLMConfig(python=str(tmp_path / "none"))).version() == "not installed"


# A stand-in for `vllm serve` (a scripted test double, never used as the real thing): it writes a
# real vLLM log excerpt, then answers /health, /v1/models (only with the key) and /version.
FAKE_VLLM = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
model, port, key = argv[0], int(argv[argv.index("--port") + 1]), argv[argv.index("--api-key") + 1]
log = open(os.environ["FAKE_VLLM_LOG"]).read()
if os.environ.get("FAKE_VLLM_EXIT"):
    sys.stderr.write(log)
    sys.exit(int(os.environ["FAKE_VLLM_EXIT"]))
print(log, flush=True)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/v1/models" and self.headers.get("Authorization") != "Bearer " + key:
            body, code = {"error": "Unauthorized"}, 401
        else:
            body, code = {
                "/health": {},
                "/version": {"version": "0.33.0"},
                "/v1/models": {"object": "list", "data": [{"id": model, "max_model_len": 4096}]},
            }[self.path], 200
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str, exit_code: str = "") -> VLLMEngine:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    monkeypatch.setenv("FAKE_VLLM_LOG", str(LOGS / log))
    monkeypatch.setenv("FAKE_VLLM_EXIT", exit_code)
    return engine(
        launch_command=[sys.executable, str(script)], arm_gpus={"candidate": "1"}, ready_timeout_s=30
    )


def test_launch_records_model_version_and_kv_capacity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = fake_engine(tmp_path, monkeypatch, "kv_capacity.log")
    with eng.launch(eng.launch_spec(parse_variant("fp8kv")), LaunchSlot("candidate", tmp_path / "logs")) as h:
        assert h.alive() and h.api_key not in h.command and "***" in h.command
        assert h.info["served_model"] == BASE and h.info["max_model_len"] == 4096
        assert h.info["vllm_version"] == "0.33.0" and h.info["cuda_visible_devices"] == "1"
        capacity = h.info["kv_capacity"]
        assert isinstance(capacity, dict) and capacity["kv_tokens"] == 42656
        assert h.process is not None and _group_members(h.process.pid)
    assert not h.alive() and not _group_members(h.process.pid)  # the whole group is gone


def test_the_next_arm_waits_until_the_whole_process_group_is_gone() -> None:
    # vLLM's engine-core processes hold GPU memory until they have exited, after the kill
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"], start_new_session=True)
    t0 = time.monotonic()
    assert wait_for_group_exit(proc.pid, timeout_s=10, poll_s=0.05)  # its zombie does not count
    assert time.monotonic() - t0 > 0.3
    proc.wait()
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert wait_for_group_exit(slow.pid, timeout_s=0.2, poll_s=0.05) is False
    finally:
        slow.kill()
        slow.wait()


def test_a_launch_that_dies_is_diagnosed_with_the_key_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = fake_engine(tmp_path, monkeypatch, "invalid_choice.log", exit_code="2")
    with (
        pytest.raises(ServerStartError, match="exited during startup") as err,
        eng.launch(eng.launch_spec(parse_variant("bf16")), LaunchSlot("baseline", tmp_path / "logs")),
    ):
        pass
    assert "--dtype bf16" in err.value.fix and "--api-key '***'" in err.value.detail


# -- diagnosis from real vLLM logs, and the KV pool ----------------------------------------------------
EXPECTED = {
    "cuda_oom.log": "lower gpu_memory_utilization",
    "cuda_driver_oom.log": "the GPU ran out of memory",
    "no_cache_memory.log": "raise gpu_memory_utilization",
    "free_memory_on_startup.log": "only 3.22 of 4.0 GiB was free",
    "quant_capability.log": "compute capability 8.6) cannot run fp8 (needs 9.0)",
    "fp8_arch.log": "no FP8 (e4m3) support",
    "invalid_choice.log": "does not accept --dtype bf16",
    "invalid_kv_cache_dtype.log": "no KV cache dtype fp8_e4m3fn",
    "unrecognized_arguments.log": "does not know --tp-size 2",
    "engine_core_init_failed.log": "engine core died: the root cause",
    "engine_core_failed_to_start.log": "engine core died: the root cause",
    "engine_dead.log": "engine core died: the root cause",
    "kv_capacity.log": None,
    "invalid_choice_0.34.log": "does not accept --dtype bf16",
    "invalid_kv_cache_dtype_0.34.log": "no KV cache dtype fp8_e4m3fn",
    "unrecognized_arguments_0.34.log": "does not know --tp-size 2",
}


@pytest.mark.parametrize(("fixture", "expected"), EXPECTED.items())
def test_diagnosis_of_real_logs(fixture: str, expected: str | None) -> None:
    text = (LOGS / fixture).read_text()
    assert text.startswith("# source: "), "each fixture names where it was seen"
    found = diagnose(text)
    assert (found is None) if expected is None else (expected in (found or "")), found


def test_every_log_fixture_is_covered() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


def test_diagnosis_of_messages_worded_as_in_vllms_source() -> None:
    # worded as vLLM 0.33.0 formats them (v1/core/kv_cache_planning.py, config/model.py); no real log
    # (0.34.0 words them the same, the memory hint aside: the next test)
    seq = (
        "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (8.82 GiB). Based on the "
        "available memory, the estimated maximum model length is 72272. Try increasing"
    )
    assert "vLLM estimates 72272 fits" in (diagnose(seq) or "")
    mismatch = (
        "ValueError: Quantization method specified in the model config (compressed-tensors) does not match "
        "the quantization method specified in the `quantization` argument (fp8)."
    )
    assert "already quantized with compressed-tensors" in (diagnose(mismatch) or "")
    died = "ValueError: something odd\nERROR [core.py:396] EngineCore failed to start."
    assert "(ValueError: something odd)" in (diagnose(died) or "")
    assert diagnose("INFO all fine") is None


# vLLM 0.34.0 v1/core/kv_cache_planning.py: _check_enough_kv_cache_memory with _more_kv_cache_memory_hint
_SEQ_034 = (
    "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (8.82 GiB). Based on the available memory, the "
    "estimated maximum model length is 72272. {hint} Decreasing `max_model_len` also reduces what is needed. "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
_ALL_LEFT_034 = (
    "The extensible KV cache already takes all device memory left after the model, its activations, CUDA "
    "graphs and warmup; decrease `max_model_len` or `max_num_seqs`, or the model needs a device with more "
    "memory. CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
)
_CAPPED_034 = (
    "The KV cache gets what is left after the model and its activations within `gpu_memory_utilization`=0.85; "
    "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`."
)


def test_memory_advice_follows_vllm_034s_extensible_kv_cache() -> None:
    """0.34 gives the KV cache all memory left when gpu_memory_utilization is unset (1.0): "raise it"
    is no fix there, and the diagnosis must not say it."""
    full = diagnose(_SEQ_034.format(hint=_ALL_LEFT_034)) or ""
    assert "vLLM estimates 72272 fits" in full and "lower max_model_len" in full
    assert "raise gpu_memory_utilization" not in full and "enforce_eager" in full
    none_left = (
        diagnose(f"ValueError: No available memory for the cache blocks. {_ALL_LEFT_034} See https://") or ""
    )
    assert "cannot give more" in none_left and "raise gpu_memory_utilization" not in none_left
    capped = diagnose(_SEQ_034.format(hint=_CAPPED_034)) or ""
    assert "raise gpu_memory_utilization" in capped and "or unset it" in capped
    # 0.33's wording (and 0.34 with the extensible KV cache off) keeps the old advice
    old = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when"
    assert "raise gpu_memory_utilization (e.g. 0.9)" in (diagnose(old) or "")


# vLLM 0.34.0 on CUDA, worded as its source formats them: v1/worker/gpu_worker.py (the reservation),
# v1/worker/extensible_kv_cache.py (measure_kv_cache_blocks, extend_kv_cache), v1/core/kv_cache_utils.py
_LOG_034 = (
    "(EngineCore pid=7) INFO 01-05 10:00:01 [gpu_worker.py:796] Available KV cache memory: 120.5 GiB\n"
    "(EngineCore pid=7) INFO 01-05 10:00:40 [extensible_kv_cache.py:693] Memory after warmup: 118.2 GiB free, "
    "0.5 GiB committed to the KV cache, 1.4 GiB kept for transient activations (1.4 GiB allocated at peak, "
    "0.0 GiB of torch reservation growth); 14650 KV cache blocks (114.45 GiB) fit within the requested 139.8 GiB. "
    "Torch may reserve up to 130.1 GiB.\n"
    "(EngineCore pid=7) INFO 01-05 10:00:40 [kv_cache_utils.py:1169] GPU KV cache size: 937,600 tokens, "
    "Maximum concurrency for 131,072 tokens per request: 7.15x\n"
    "(EngineCore pid=7) INFO 01-05 10:00:41 [extensible_kv_cache.py:536] Extended KV cache to 14650 blocks "
    "(114.45 GiB).\n"
)


def test_vllm_034_pool_is_the_extended_one_sized_after_warmup() -> None:
    """0.34's "Available KV cache memory" is only the reservation before warmup; the pool is what
    "Extended KV cache to N blocks (X GiB)" states, and it was sized after CUDA graph capture."""
    cap = vllm_capacity(_LOG_034)
    assert cap is not None and cap["kv_tokens"] == 937_600 and cap["max_concurrency"] == 7.15
    assert cap["kv_mib"] == round(114.45 * 1024, 2)  # not 120.5 GiB, the reservation
    assert cap["pool_memory"] == "memory free after warmup and CUDA graphs (extensible KV cache)"
    two_ranks = _LOG_034.replace(
        "(EngineCore pid=7) INFO 01-05 10:00:41", "(Worker_TP0 pid=8) INFO 01-05 10:00:41"
    )
    two_ranks += "(Worker_TP1 pid=9) INFO 01-05 10:00:41 [extensible_kv_cache.py:536] Extended KV cache to 14650 blocks (114.45 GiB).\n"
    assert vllm_capacity(two_ranks)["kv_mib"] == round(2 * 114.45 * 1024, 2)  # type: ignore[index]
    reserved, _, tokens, _ = _LOG_034.splitlines()  # 0.33, or 0.34 without VMM: no warmup sizing
    before = vllm_capacity(f"{reserved}\n{tokens}")
    assert before is not None and before["pool_memory"] == "free memory" and before["kv_mib"] == 120.5 * 1024


def test_kv_capacity_from_a_real_log_and_the_current_one_line_format() -> None:
    cap = vllm_capacity((LOGS / "kv_capacity.log").read_text())
    assert cap is not None and cap["kv_tokens"] == 42656 and cap["kv_mib"] == 6666.24
    assert cap["max_concurrency"] == 1.3 and cap["max_concurrency_at_tokens"] == 32768
    # vLLM 0.33.0 and 0.34.0 log both on one line (v1/core/kv_cache_utils.py update_kv_cache_capacity)
    line = "(EngineCore pid=7) INFO [kv_cache_utils.py:1147] GPU KV cache size: 420,656 tokens, Maximum concurrency for 131,072 tokens per request: 3.21x"
    cap = vllm_capacity(line)
    assert cap is not None and cap["kv_tokens"] == 420656 and cap["max_concurrency"] == 3.21


def test_a_prefilled_chat_continues_the_assistant_turn() -> None:
    """#18.7: vLLM needs continue_final_message with add_generation_prompt false (it refuses the
    first with its default add_generation_prompt true)."""
    from tests.engines.test_vllm_scorer import run_against

    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>\n"}]

    async def body(scorer: object, sent: list[tuple[str, object]]) -> object:
        await scorer.chat({"messages": prefill})  # type: ignore[attr-defined]
        await scorer.chat({"messages": prefill[:1]})  # type: ignore[attr-defined]
        return [payload for path, payload in sent if path == "/v1/chat/completions"]

    continued, plain = run_against(body)
    assert continued["continue_final_message"] is True and continued["add_generation_prompt"] is False
    assert "continue_final_message" not in plain and "add_generation_prompt" not in plain
