"""Attach mode's reading of a running SGLang server: ``/server_info`` proves it is one (vLLM's dev
mode has the endpoint too, so SGLang is told by its ``model_path`` server arg) and holds every
server arg, which the two arms must share beyond quantization."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from evalgate.engines._gpu import attached_concurrency
from evalgate.engines.api import AttachDialect, Get, scorer_ignoring_determinism
from evalgate.engines.sglang._provenance import sglang_provenance
from evalgate.engines.sglang._scorer import SGLangScorer
from evalgate.engines.sglang._server_info import read_server_info
from evalgate.redact import is_secret_key

__all__ = ["DIALECT"]


def _read(get: Get) -> dict[str, Any] | None:
    return read_server_info(get, needs="model_path")


def _fingerprint(data: Mapping[str, Any], cards: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    # launch_command is the raw argv (SGLang redacts only watermark keys): an --admin-api-key
    # evalgate was never given would be recorded in clear, so it is not kept at all
    args = {
        k: v
        for k, v in data.items()
        if k not in ("internal_states", "launch_command") and not is_secret_key(k)
    }
    states = data.get("internal_states") or [{}]
    pools = [st.get("max_total_num_tokens") if isinstance(st, dict) else None for st in states]
    if args.get("max_total_num_tokens") is None and all(pools):  # newer SGLang: one per DP rank
        args["max_total_num_tokens"] = sum(int(p) for p in pools)
    return {"version": args.pop("version", None), "server_args": args}


def _instance(fp: Mapping[str, Any]) -> str | None:
    """One running server: SGLang draws ``random_seed`` (30 bits) at start unless --random-seed is
    given (sglang/srt/server_args.py, ``ServerArgs.__post_init__``) and /server_info reports it
    with its port (and, from 0.5.23, this launch's ``startup_time``); two URLs whose every server
    arg is equal, these included, reach one server (or one identical to it, quantization too)."""
    args = fp.get("server_args") or {}
    if args.get("random_seed") is None:
        return None
    return json.dumps({"version": fp.get("version"), **args}, sort_keys=True, default=str)


DIALECT = AttachDialect(
    name="sglang",
    endpoint="/server_info",
    read=_read,
    fingerprint=_fingerprint,
    settings=lambda fp: dict(fp.get("server_args") or {}),
    concurrency=attached_concurrency,
    scorer=scorer_ignoring_determinism(SGLangScorer),
    instance=_instance,
    provenance=lambda fp: sglang_provenance(fp.get("server_args") or {}),
    # Differ between replicas of one deployment, or between two launches of the same settings:
    # internal ports and addresses, GPU ids, the KV pool measured from free memory at startup,
    # random_seed (SGLang draws one when unset; evalgate seeds each request), and what SGLang
    # 0.5.23's /server_info adds beside the server args (http_server.py ``server_info`` and
    # utils/common.py ``build_server_info``): ``startup_time`` (this launch's timings),
    # ``launch_command`` (the raw argv, with its paths and port), ``kv_events`` (the publisher's
    # host and port), the scheduler's ``status`` and ``kv_event_sources``. Paths of TLS files and
    # the download cache are per host too.
    replica_keys=frozenset(
        "nccl_port dist_init_addr base_gpu_id gpu_id_step node_rank random_seed"
        " max_total_num_tokens max_req_input_len"
        " startup_time launch_command kv_events kv_event_sources status"
        " grpc_port disaggregation_bootstrap_port engine_info_bootstrap_port smg_http_sidecar_port"
        " gated_launch_port ssl_keyfile ssl_certfile download_dir".split()
    ),
    quant_keys=frozenset({"quantization_param_path", "mem_fraction_static"}),
)
