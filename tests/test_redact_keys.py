"""Settings are masked by secret key names, not by substring (#31): ``tokenizer=`` and
``tokenizer_backend=`` stay visible (a tokenizer difference between the arms must show), while
``api_key``, ``hf_token``, ``password`` and URL credentials are masked, in lm-eval's model_args, a
server's reported args, a variant's environment and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalgate.cli._dry_run import _masked_env
from evalgate.engines import sglang
from evalgate.lmeval.samples import safe_model_args
from evalgate.redact import MASK, is_secret_key, mask_args, mask_settings
from evalgate.report import render_run
from tests.helpers.runs import SynthSuite, build_run
from tests.helpers.samples import compare_to_bf16

LMEVAL = Path(__file__).resolve().parent / "fixtures" / "lmeval"

SHOWN = [
    "tokenizer", "tokenizer_backend", "tokenizer_mode", "max_tokens", "max_gen_toks", "add_bos_token",
    "pad_token", "eos_token", "skip_special_tokens", "TOKENIZERS_PARALLELISM", "ssl_keyfile",
    "speculative_token_map", "pretrained", "tokenized_requests", "keys", "keyfile",
]  # fmt: skip
MASKED = [
    "key", "api_key", "apiKey", "API-KEY", "admin_api_key", "openai_api_key", "token", "hf_token", "HF_TOKEN",
    "auth_token", "access_token", "accessToken", "HUGGING_FACE_HUB_TOKEN", "secret", "client_secret",
    "password", "ssl_keyfile_password", "passwd", "credential", "credentials", "AWS_SECRET_ACCESS_KEY",
]  # fmt: skip


@pytest.mark.parametrize("name", SHOWN)
def test_names_that_merely_contain_a_secret_word_are_shown(name: str) -> None:
    assert not is_secret_key(name)


@pytest.mark.parametrize("name", MASKED)
def test_secret_names_are_masked(name: str) -> None:
    assert is_secret_key(name)


def test_model_args_show_the_tokenizer_and_mask_the_secrets() -> None:
    args = (
        "pretrained=HuggingFaceTB/SmolLM2-135M,tokenizer=HuggingFaceTB/SmolLM2-tok,tokenizer_backend=huggingface,"
        "max_tokens=256,add_bos_token=True,api_key=sk-live-1234,hf_token=hf_abcd,password=pw-9876,"
        "base_url=http://alice:hunter2@10.0.0.1:8000/v1"
    )
    out = safe_model_args(args)
    for shown in ("tokenizer=HuggingFaceTB/SmolLM2-tok", "tokenizer_backend=huggingface", "max_tokens=256",
                  "add_bos_token=True", "pretrained=HuggingFaceTB/SmolLM2-135M"):  # fmt: skip
        assert shown in out, out
    for masked in ("api_key", "hf_token", "password"):
        assert f"{masked}={MASK}" in out
    assert "sk-live" not in out and "hf_abcd" not in out and "pw-9876" not in out and "hunter2" not in out
    assert "base_url=http://***@10.0.0.1:8000/v1" in out
    assert mask_args("a = 1, secret = 2") == "a = 1, secret = ***"  # spaces kept as written


def test_settings_mappings_mask_by_key_at_any_depth() -> None:
    got = mask_settings(
        {"tokenizer_path": "t", "server": {"api_key": "k", "max_tokens": 5}, "urls": ["http://u:p@h:1"]}
    )
    assert got == {
        "tokenizer_path": "t",
        "server": {"api_key": MASK, "max_tokens": 5},
        "urls": ["http://***@h:1"],
    }


def test_sglang_server_args_keep_the_tokenizer_and_drop_the_secrets() -> None:
    data = {
        "model_path": "m", "tokenizer_path": "tok", "tokenizer_mode": "auto", "skip_tokenizer_init": False,
        "api_key": "k1", "admin_api_key": "k2", "watermark_key": "w", "ssl_keyfile_password": "p", "version": "0.5",
    }  # fmt: skip
    args = sglang.DIALECT.fingerprint(data, [])["server_args"]
    assert {"tokenizer_path", "tokenizer_mode", "skip_tokenizer_init", "model_path"} <= set(args)
    assert not {"api_key", "admin_api_key", "watermark_key", "ssl_keyfile_password"} & set(args)


def test_dry_run_environment_masks_secrets_only() -> None:
    assert _masked_env(("TOKENIZERS_PARALLELISM", "false")) == "TOKENIZERS_PARALLELISM=false"
    assert _masked_env(("HF_TOKEN", "hf_x")) == f"HF_TOKEN={MASK}"


def test_report_masks_a_secret_variant_setting_and_shows_the_tokenizer(tmp_path: Path) -> None:
    launch = {
        arm: {
            "model": "m.gguf",
            "args": [["--tokenizer", f"tok-{arm}"], ["--hf-token", "hf_live_secret"]],
            "env": [["HF_TOKEN", "hf_env_secret"], ["TOKENIZERS_PARALLELISM", "false"]],
        }
        for arm in ("baseline", "candidate")
    }
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10))], extra={"launch": launch})
    render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "tok-baseline" in page and "tok-candidate" in summary  # a tokenizer difference is visible
    assert "hf_live_secret" not in page and "hf_env_secret" not in page and "TOKENIZERS_PARALLELISM" in page


def test_an_import_shows_the_tokenizer_of_each_arm(tmp_path: Path) -> None:
    cand = tmp_path / "keyed"
    shutil.copytree(LMEVAL / "int4", cand)
    (results,) = cand.rglob("results_*.json")
    doc = json.loads(results.read_text())
    doc["config"]["model_args"] = (
        "tokenizer=HuggingFaceTB/other-tok,tokenizer_backend=huggingface,hf_token=hf_x1y2z3"
    )
    results.write_text(json.dumps(doc))
    out = tmp_path / "run"
    compare_to_bf16(cand, out)
    args = json.loads((out / "manifest.json").read_text())["imported"]["candidate"]["model_args"]
    assert args == f"tokenizer=HuggingFaceTB/other-tok,tokenizer_backend=huggingface,hf_token={MASK}"
    assert "other-tok" in (out / "report.html").read_text(encoding="utf-8")
