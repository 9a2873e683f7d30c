"""The two open sections of a run folder, typed: a record's ``extra`` and an arm's ``server``.

Both began as free-form dicts that many modules wrote into, so the JSON Schemas said nothing of
them. ``RecordExtra`` and ``ServerFacts`` name every key evalgate writes (each an optional field
with a description, in docs/schemas/), and still read like the mappings they replaced (``get``,
``in``, ``[key]``, ``**``), so the gate's and the report's readers stay as they were.

Unknown keys are kept (``extra="allow"``), not refused: a suite or engine added later writes
keys an older evalgate has not heard of, an imported lm-eval run carries lm-eval's own, and an
attached server reports whatever its engine version reports. Refusing them would make a run
folder unreadable by the version that must re-render or resume it; nothing gated depends on a
key that is not a field here. A section is written as it was given: a field never set is
absent (not ``null``), and the set fields come in their declared order, then the unknown keys.
The declared order is the order the writers have always produced, so files stay byte-stable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = ["Facts", "RecordExtra", "ServerFacts"]


class Facts(BaseModel):
    """An open, typed section that reads as the mapping it was written as (only keys given)."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: data[k] for k in self.keys() if k in data}

    def keys(self) -> list[str]:
        """Set fields in declared order, then unknown keys in the order given."""
        given = self.model_fields_set
        return [k for k in type(self).model_fields if k in given] + list(self.__pydantic_extra__ or {})

    def __contains__(self, key: object) -> bool:
        if key in type(self).model_fields:
            return key in self.model_fields_set
        return key in (self.__pydantic_extra__ or {})

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        extra = self.__pydantic_extra__ or {}
        return extra[key] if key in extra else self.__dict__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self[k]) for k in self.keys()]

    def __repr_args__(self) -> list[tuple[str, Any]]:  # type: ignore[override]  # only keys given
        return self.items()

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # keys, as a mapping's
        return iter(self.keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Facts, Mapping)):
            return self.to_dict() == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable content, as a dict's

    def to_dict(self) -> dict[str, Any]:
        """The section as written to disk."""
        return self.model_dump(mode="python")


class RecordExtra(Facts):
    """A record's ``extra``: what the item was (from its suite) and facts about the answer."""

    model_config = ConfigDict(extra="allow", frozen=True)
    lm_eval: dict[str, Any] | None = Field(
        None,
        description="Imported from lm-eval --log_samples: the sample's task, doc_id and doc_hash.",
    )
    subject: str | None = Field(None, description="mmlu (grouped tasks): the item's subject.")
    workers: list[str] | None = Field(
        None,
        description="An arm behind smg: the worker(s) smg said served the item's requests "
        "(x-smg-routed-worker-id; one under consistent_hashing).",
    )
    grader: str | None = Field(None, description="A private exam: the item's grader.")
    category: str | None = Field(None, description="tool_calls: the case's BFCL category.")
    tool_prefill: bool | None = Field(
        None, description="tool_calls: whether the tool-call prefix was prefilled (suite option prefill)."
    )
    context_length: int | None = Field(
        None, description="long_context: the target prompt length in tokens (the gate's per-length rows)."
    )
    task: str | None = Field(None, description="long_context: the RULER-style task (niah, qa, ...).")
    depth: float | None = Field(None, description="long_context: where the needle sits, 0 (start) to 1.")
    prompt_tokens: int | None = Field(
        None, description="long_context: prompt tokens of the text as fitted by the server's tokenizer."
    )
    sent_hash: str | None = Field(
        None,
        description="long_context: digest of the exact text sent; both arms of a pair must have the same.",
    )
    empty: bool | None = Field(None, description="Generation: the response was empty (or only whitespace).")
    finish_reason: str | None = Field(
        None, description="Generation: the server's finish_reason (length: cut at the token cap)."
    )
    truncated_tokens: int | None = Field(
        None, description="Generation: prompt tokens the server cut to fit its context (when it said so)."
    )
    no_answer: bool | None = Field(
        None, description="Generation: the answer filter found nothing (it fell back to its default)."
    )
    reasoning_content: str | None = Field(
        None, description="Chat: the reasoning kept apart from the graded content (not for a private suite)."
    )
    think_inline: bool | None = Field(
        None, description="Chat: the content held an inline <think> block, cut at its last </think>."
    )
    error: str | None = Field(
        None, description="--errors-as-wrong (in memory, never written): the error of an item scored 0."
    )
    nonfinite: dict[str, str] | None = Field(
        None,
        description="Values that were NaN or infinite, written as null (strict JSON has no such numbers): "
        "path (metrics.acc, response.0.0) -> nan, inf or -inf. Read back as those floats.",
    )
    surrogates: list[str] | None = Field(
        None,
        description="Fields whose text holds a lone UTF-16 surrogate, which UTF-8 cannot hold: the line "
        "is written ASCII-only, with \\uXXXX escapes, so the text reads back exactly.",
    )


class ServerFacts(Facts):
    """An arm's ``server``: facts read from its server at launch, and the run's per-suite cache flush."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    # llama.cpp
    kv_buffers_mib: dict[str, Any] | None = Field(
        None, description="llama.cpp: KV buffer sizes in MiB from the log (K, V, total)."
    )
    cpu_features: list[str] | None = Field(
        None, description="llama.cpp: the CPU features the build reports using (system_info)."
    )
    # attach mode and the fake engine
    attached: bool | None = Field(None, description="Attach mode: evalgate started nothing.")
    protocol: str | None = Field(None, description="Attach mode: the engine dialect the servers speak.")
    urls: list[str] | None = Field(None, description="Attach mode (and the fake engine): the arm's URLs.")
    servers: dict[str, Any] | None = Field(
        None, description="Attach mode: each URL's fingerprint (version, model, settings it reports)."
    )
    # an arm of several workers behind smg (evalgate.engines.gateway)
    gateway: dict[str, Any] | None = Field(
        None,
        description="An arm behind smg: its URL, smg's version, the routing policy, each worker (url, role, "
        "status; launched: its command and log), the fixed probe each worker answered, and answers per worker.",
    )
    # vLLM
    served_model: str | None = Field(None, description="vLLM: the served model's id (/v1/models).")
    max_model_len: int | None = Field(None, description="vLLM: its max_model_len (/v1/models).")
    vllm_version: str | None = Field(None, description="vLLM: the server's /version.")
    cpu_isa: dict[str, str] | None = Field(
        None,
        description="vLLM on the CPU, where a variant needs AVX-512 or AMX (FP8): per instruction set, "
        "advertised or not and whether one of its instructions executed (evalgate.engines._isa).",
    )
    kv_capacity: dict[str, Any] | None = Field(
        None, description="vLLM: the KV pool the log states (evalgate.store.capacity's form)."
    )
    # SGLang: the /server_info fields kept (evalgate.engines.sglang._server_info), as it reports them
    version: Any = Field(None, description="SGLang /server_info: the server's version.")
    model_path: Any = Field(None, description="SGLang /server_info: model_path.")
    dtype: Any = Field(None, description="SGLang /server_info: dtype.")
    kv_cache_dtype: Any = Field(None, description="SGLang /server_info: kv_cache_dtype as given.")
    quantization: Any = Field(None, description="SGLang /server_info: quantization.")
    quantization_param_path: Any = Field(None, description="SGLang /server_info: the KV scales file.")
    tp_size: Any = Field(None, description="SGLang /server_info: tensor parallel size.")
    dp_size: Any = Field(None, description="SGLang /server_info: data parallel size.")
    context_length: Any = Field(None, description="SGLang /server_info: context_length.")
    max_req_input_len: Any = Field(None, description="SGLang /server_info: max_req_input_len.")
    mem_fraction_static: Any = Field(None, description="SGLang /server_info: mem_fraction_static.")
    max_running_requests: Any = Field(None, description="SGLang /server_info: max_running_requests.")
    chunked_prefill_size: Any = Field(None, description="SGLang /server_info: chunked_prefill_size.")
    attention_backend: Any = Field(None, description="SGLang /server_info: attention_backend.")
    sampling_backend: Any = Field(None, description="SGLang /server_info: sampling_backend.")
    random_seed: Any = Field(None, description="SGLang /server_info: random_seed.")
    tool_call_parser: Any = Field(None, description="SGLang /server_info: tool_call_parser.")
    reasoning_parser: Any = Field(None, description="SGLang /server_info: reasoning_parser.")
    chat_template: Any = Field(None, description="SGLang /server_info: chat_template.")
    max_total_num_tokens: int | None = Field(None, description="SGLang: tokens the KV pool holds.")
    memory_usage_gb: Any = Field(
        None, description="SGLang: memory_usage per scheduler (one dict, or a list with one per rank)."
    )
    capacity: dict[str, Any] | None = Field(
        None, description="SGLang: the KV pool from /server_info, kv_types from the log."
    )
    server_info_error: str | None = Field(None, description="SGLang: why /server_info could not be read.")
    # launched GPU engines
    cuda_visible_devices: str | None = Field(
        None, description="SGLang, vLLM: the arm's CUDA_VISIBLE_DEVICES."
    )
    kv_scales: dict[str, Any] | None = Field(
        None, description="SGLang, vLLM with FP8 KV: the KV scales used, as read back from the log."
    )
    # imported runs
    lm_eval: dict[str, Any] | None = Field(
        None, description="An imported lm-eval run: its model, model_args (secrets masked) and version."
    )
    # written by the run
    cache_flush: dict[str, str] | None = Field(
        None,
        description="Per suite: 'flushed', or why the prefix cache could not be emptied before it.",
    )
