"""The two open sections of a run folder, typed: a record's ``extra`` and an arm's ``server``.

Both began as free-form dicts that many modules wrote into and read by string key, so a typo
was a silent ``None`` and the JSON Schemas said nothing of them. ``RecordExtra`` and
``ServerFacts`` name every key evalgate writes (each a typed field with a description, in
docs/schemas/), and the gateway, KV capacity and KV scales facts the gate and the report read
have small models of their own. They are read by field (``record.extra.finish_reason``), never
by key: ``section["key"]``, ``"key" in section`` and iteration raise ``TypeError`` (there is no
``get``), so a reader cannot fall back to an unchecked key (tests/store/test_typed_facts.py).

Writing and reading differ on purpose. Code that builds a section (a suite's result, an
engine's launch facts) is refused a key that is not a field, with an error naming it: the field
is added here first. Reading a file (``context=READ``: a record line, a manifest) keeps keys it
does not know, since a run folder written by another evalgate version, or an lm-eval import,
must still load, re-render and resume; nothing gated depends on them, and they are written back
as they were. A section is written as it was given: a field never set is absent (not ``null``),
set fields come in their declared order (the order the writers always produced, so files stay
byte-stable), then the unknown keys. In a ``RecordExtra`` built by code, None means "not said"
and is not written; a null read from a file is kept.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, ClassVar, Final, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from evalgate.store.provenance import Provenance

__all__ = [
    "READ",
    "Facts",
    "GatewayFacts",
    "GatewayWorkerFacts",
    "KvCapacity",
    "KvScales",
    "RecordExtra",
    "Served",
    "ServerFacts",
]

READ: Final[dict[str, bool]] = {"read_facts": True}
"""Validation context of a file being read: unknown keys are kept, nulls as written."""
F = TypeVar("F", bound="Facts")


def _reading(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and bool(info.context.get("read_facts"))


class Facts(BaseModel):
    """An open, typed section, written as given (set fields only); read by field, never by key."""

    model_config = ConfigDict(extra="allow")
    _none_unsaid: ClassVar[bool] = False
    """Whether a None given by code means "not said" (not written)."""

    @model_validator(mode="wrap")
    @classmethod
    def _written_or_read(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if isinstance(data, Mapping) and not _reading(info):
            unknown = [k for k in data if k not in cls.model_fields]
            if unknown:
                raise ValueError(_unknown(cls, str(unknown[0])))
            if cls._none_unsaid:
                data = {k: v for k, v in data.items() if v is not None}
        return handler(data)

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: data[k] for k in self._given() if k in data}

    def _given(self) -> list[str]:
        """Set fields in declared order, then unknown keys in the order given."""
        given = self.model_fields_set
        return [k for k in type(self).model_fields if k in given] + list(self.__pydantic_extra__ or {})

    def to_dict(self) -> dict[str, Any]:
        """The section as written to disk (JSON-ready values, nested sections as dicts)."""
        return self.model_dump(mode="python")

    def updated(self: F, *sections: Facts | None, **fields: Any) -> F:
        """A new section: this one's keys, then each of ``sections``', then ``fields`` (checked as
        any write: a name that is not a field is refused; keys read from a file are kept)."""
        if fields:
            type(self).model_validate(fields)
        data = self.to_dict()
        for section in sections:
            data.update(section.to_dict() if section is not None else {})
        data.update((k, v) for k, v in fields.items() if v is not None or not self._none_unsaid)
        return type(self).model_validate(data, context=READ)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Facts):
            return type(self) is type(other) and self.to_dict() == other.to_dict()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable content, as a dict's

    def __bool__(self) -> bool:
        return bool(self._given())

    def __repr_args__(self) -> list[tuple[str, Any]]:  # type: ignore[override]  # only keys given
        return [(k, getattr(self, k)) for k in self._given()]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in type(self).model_fields and not name.startswith("_"):
            raise AttributeError(_unknown(type(self), name))
        super().__setattr__(name, value)

    def __getitem__(self, key: object) -> Any:
        raise TypeError(_not_a_mapping(self, key))

    def __contains__(self, key: object) -> bool:
        raise TypeError(_not_a_mapping(self, key))

    def __iter__(self) -> Any:
        raise TypeError(_not_a_mapping(self, None))


def _unknown(cls: type[Facts], key: str) -> str:
    near = difflib.get_close_matches(key, list(cls.model_fields), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return (
        f"{cls.__name__} has no field {key!r}{hint}: add it to evalgate/store/facts.py with a "
        "description, then regenerate docs/schemas with `python -m evalgate.schemas`"
    )


def _not_a_mapping(section: Facts, key: object) -> str:
    name = type(section).__name__
    field = f".{key}" if isinstance(key, str) else ".<field>"
    return f"{name} is read by field ({name}{field}), not by key; to_dict() gives it as written"


def _field(description: str) -> Any:
    return Field(None, description=description)


class Served(Facts):
    """Where a record stood in its server's order of service (``evalgate.run.order``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    launch: str | None = _field("The launch of the arm's server that answered (its group's UTC start).")
    seq: int | None = _field("0-based: the items sent to that launch before this one.")
    in_flight: int | None = _field("Other items of this arm in flight when this one was sent.")
    sent: float | None = _field("When its first request was sent (UTC epoch seconds).")
    done: float | None = _field("When its last answer came back (UTC epoch seconds).")


class RecordExtra(Facts):
    """A record's ``extra``: what the item was (from its suite) and facts about the answer."""

    model_config = ConfigDict(extra="allow", frozen=True)
    _none_unsaid: ClassVar[bool] = True
    lm_eval: dict[str, Any] | None = _field(
        "Imported from lm-eval --log_samples: the sample's task, doc_id and doc_hash."
    )
    subject: str | None = _field("mmlu (grouped tasks): the item's subject.")
    src: str | None = _field(
        "mmlu_pro: the source exam of the item within its category (the unit the "
        "per-category intervals cluster on); absent in records written before it was recorded."
    )
    workers: list[str] | None = _field(
        "An arm behind smg: the worker(s) smg said served the item's requests "
        "(x-smg-routed-worker-id; one under consistent_hashing)."
    )
    grader: str | None = _field("A private exam: the item's grader.")
    category: str | None = _field("tool_calls: the case's BFCL category.")
    tool_prefill: bool | None = _field(
        "tool_calls: whether the tool-call prefix was prefilled (suite option prefill)."
    )
    context_length: int | None = _field(
        "long_context: the target prompt length in tokens (the gate's per-length rows)."
    )
    task: str | None = _field("long_context: the RULER-style task (niah, qa, ...).")
    depth: float | None = _field("long_context: where the needle sits, 0 (start) to 1.")
    prompt_tokens: int | None = _field(
        "long_context: prompt tokens of the text as fitted by the server's tokenizer."
    )
    sent_hash: str | None = _field(
        "long_context: digest of the exact text sent; both arms of a pair must have the same."
    )
    empty: bool | None = _field("Generation: the response was empty (or only whitespace).")
    finish_reason: str | None = _field(
        "Generation: the server's finish_reason (length: cut at the token cap)."
    )
    truncated_tokens: int | None = _field(
        "Generation: prompt tokens the server cut to fit its context (when it said so)."
    )
    no_answer: bool | None = _field(
        "Generation: the answer filter found nothing (it fell back to its default)."
    )
    reasoning_content: str | None = _field(
        "Chat: the reasoning kept apart from the graded content (not for a private suite)."
    )
    think_inline: bool | None = _field(
        "Chat: the content held an inline <think> block, cut at its last </think>."
    )
    error: str | None = _field("--errors-as-wrong (in memory, never written): the error of an item scored 0.")
    nonfinite: dict[str, str] | None = _field(
        "Values that were NaN or infinite, written as null (strict JSON has no such numbers): "
        "path (metrics.acc, response.0.0) -> nan, inf or -inf. Read back as those floats."
    )
    served: Served | None = _field(
        "The order of service: the launch that answered, the item's place in its sequence, the items "
        "in flight beside it, sent and done times. Absent in records written before it was recorded."
    )
    surrogates: list[str] | None = _field(
        "Fields whose text holds a lone UTF-16 surrogate, which UTF-8 cannot hold: the line "
        "is written ASCII-only, with \\uXXXX escapes, so the text reads back exactly."
    )


class KvCapacity(Facts):
    """An engine's KV pool as its server stated it at launch (``evalgate.store.capacity``'s form)."""

    engine: str | None = _field("The engine that stated it (sglang, vllm).")
    source: str | None = _field("Where it was read (sglang /server_info, sglang log, vllm log, ...).")
    kv_tokens: int | None = _field("Tokens the KV pool holds (all ranks).")
    kv_mib: int | float | None = _field("The pool's memory in MiB, where stated.")
    kv_types: str | None = _field("The pool's element type (SGLang: the allocation line's dtype).")
    max_running_requests: int | None = _field("SGLang: the scheduler's max_running_requests.")
    context_length: int | None = _field("SGLang /server_info: context_length (else max_req_input_len).")
    max_concurrency: float | None = _field("vLLM: the log's maximum concurrency at its tokens per request.")
    max_concurrency_at_tokens: int | None = _field("vLLM: the tokens per request of max_concurrency.")
    pool_sized_by_memory: bool | None = _field("The pool is sized from memory, so tokens are the capacity.")
    pool_memory: str | None = _field("vLLM: what sized the pool (free memory, or explicit on the CPU).")


class KvScales(Facts):
    """The KV scales an FP8 KV arm used, as its log (and vLLM: the folder it loaded) says."""

    quantization: str | None = _field("vLLM: the engine config's quantization method (None: no method).")
    k_scale: list[float] | None = _field("vLLM: the folder's K scales, [min, max] over layers ([] none).")
    v_scale: list[float] | None = _field("vLLM: the folder's V scales, [min, max] over layers ([] none).")
    scale: str | None = _field("file, checkpoint, 1.0 (a fallback: no scales) or unknown.")
    file: str | None = _field("The scales file given (SGLang) or the copy's record (vLLM).")
    log: str | None = _field("The log line that said it.")


class GatewayWorkerFacts(Facts):
    """One worker behind smg: as smg listed it, and (launched) how evalgate started it."""

    url: str | None = _field("The worker's URL.")
    role: str | None = _field("regular, or prefill / decode / encode under PD disaggregation.")
    model_id: str | None = _field("The model id smg lists for it.")
    status: str | None = _field("pending, ready, not_ready or failed (smg's word).")
    healthy: bool | None = _field("smg's health flag.")
    bootstrap_port: int | None = _field("A prefill worker's KV bootstrap port (PD only).")
    runtime: str | None = _field("The engine smg detected: sglang, vllm, or generic.")
    name: str | None = _field("Launched: the worker's name.")
    command: list[str] | None = _field("Launched: its command (API key masked).")
    log: str | None = _field("Launched: its log file in the run folder.")
    info: dict[str, Any] | None = _field("Launched: its own server facts (as an arm's server).")
    fingerprint: dict[str, Any] | None = _field("Attached: what the worker reported (version, model, ...).")


class GatewayFacts(Facts):
    """An arm behind smg (evalgate.engines.gateway): the gateway, its workers and their answers."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    url: str | None = _field("The gateway's URL.")
    attached: bool | None = _field("Attached: evalgate did not start it.")
    program: str | None = _field("Launched: smg's version.")
    policy: str | None = _field("The routing policy.")
    retries: str | None = _field("Launched: how smg retries (off: evalgate retries, on the same key).")
    launched: bool | None = _field("evalgate started the gateway and its workers.")
    direct_url: str | None = _field("The worker the tokenizer's calls go to (smg does not proxy them).")
    model: str | None = _field("The model id the gateway serves.")
    workers: list[GatewayWorkerFacts] | None = _field("Each worker, as smg listed it.")
    probe: dict[str, Any] | None = _field("The fixed probe each worker answered (URL -> mean KL, positions).")
    routed: dict[str, int] | None = _field(
        "Answers per worker (x-smg-routed-worker-id), over the run's sessions."
    )


class ServerFacts(Facts):
    """An arm's ``server``: facts read from its server at launch, and the run's per-suite cache flush."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    # llama.cpp
    kv_buffers_mib: dict[str, float] | None = _field(
        "llama.cpp: KV buffer sizes in MiB from the log (total, K_<type>, V_<type>)."
    )
    cpu_features: list[str] | None = _field(
        "llama.cpp: the CPU features the build reports using (system_info)."
    )
    # attach mode and the fake engine
    attached: bool | None = _field("Attach mode: evalgate started nothing.")
    protocol: str | None = _field("Attach mode: the engine dialect the servers speak.")
    urls: list[str] | None = _field("Attach mode (and the fake engine): the arm's URLs.")
    servers: dict[str, dict[str, Any]] | None = _field(
        "Attach mode: each URL's fingerprint (version, model, settings it reports)."
    )
    # an arm of several workers behind smg (evalgate.engines.gateway)
    gateway: GatewayFacts | None = _field(
        "An arm behind smg: its URL, smg's version, the routing policy, each worker (url, role, status; "
        "launched: its command and log), the fixed probe each worker answered, and answers per worker."
    )
    # vLLM
    served_model: str | None = _field("vLLM: the served model's id (/v1/models).")
    max_model_len: int | None = _field("vLLM: its max_model_len (/v1/models).")
    vllm_version: str | None = _field("vLLM: the server's /version.")
    cpu_isa: dict[str, str] | None = _field(
        "vLLM on the CPU, where a variant needs AVX-512 or AMX (FP8): per instruction set, "
        "advertised or not and whether one of its instructions executed (evalgate.engines._isa)."
    )
    kv_capacity: KvCapacity | None = _field("vLLM: the KV pool the log states.")
    # SGLang: the /server_info fields kept (evalgate.engines.sglang._server_info), as it reports them
    version: str | None = _field("SGLang /server_info: the server's version.")
    model_path: str | None = _field("SGLang /server_info: model_path.")
    dtype: str | None = _field("SGLang /server_info: dtype.")
    kv_cache_dtype: str | None = _field("SGLang /server_info: kv_cache_dtype as given.")
    quantization: str | None = _field("SGLang /server_info: quantization.")
    quantization_param_path: str | None = _field("SGLang /server_info: the KV scales file.")
    tp_size: int | None = _field("SGLang /server_info: tensor parallel size.")
    dp_size: int | None = _field("SGLang /server_info: data parallel size.")
    context_length: int | None = _field("SGLang /server_info: context_length.")
    max_req_input_len: int | None = _field("SGLang /server_info: max_req_input_len.")
    mem_fraction_static: float | None = _field("SGLang /server_info: mem_fraction_static.")
    max_running_requests: int | None = _field("SGLang /server_info: max_running_requests.")
    chunked_prefill_size: int | None = _field("SGLang /server_info: chunked_prefill_size.")
    attention_backend: str | None = _field("SGLang /server_info: attention_backend.")
    sampling_backend: str | None = _field("SGLang /server_info: sampling_backend.")
    random_seed: int | None = _field("SGLang /server_info: random_seed.")
    tool_call_parser: str | None = _field("SGLang /server_info: tool_call_parser.")
    reasoning_parser: str | None = _field("SGLang /server_info: reasoning_parser.")
    chat_template: str | None = _field("SGLang /server_info: chat_template.")
    max_total_num_tokens: int | None = _field("SGLang: tokens the KV pool holds.")
    memory_usage_gb: dict[str, Any] | list[dict[str, Any]] | None = _field(
        "SGLang: memory_usage per scheduler (one dict, or a list with one per rank)."
    )
    capacity: KvCapacity | None = _field("SGLang: the KV pool from /server_info, kv_types from the log.")
    server_info_error: str | None = _field("SGLang: why /server_info could not be read.")
    # launched GPU engines
    cuda_visible_devices: str | None = _field("SGLang, vLLM: the arm's CUDA_VISIBLE_DEVICES.")
    kv_scales: KvScales | None = _field(
        "SGLang, vLLM with FP8 KV: the KV scales used, as read back from the log."
    )
    provenance: Provenance | None = _field(
        "What the server reported it ran (KV dtype and scales, attention backend, weight format, "
        "linear kernel, batch invariance, speculative decoding): evalgate.store.provenance."
    )
    # imported runs
    lm_eval: dict[str, Any] | None = _field(
        "An imported lm-eval run: its model, model_args (secrets masked) and version."
    )
    # written by the run
    cache_flush: dict[str, str] | None = _field(
        "Per suite: 'flushed', or why the prefix cache could not be emptied before it."
    )
    pool_pressure: list[dict[str, Any]] | None = _field(
        "Per launch that served items (its ``launch``, as records' ``extra.served``): what the "
        "server's log said of its KV pool (evalgate.engines.pressure): kind (retractions, "
        "preemptions), events, requests, peak_usage (0-1). SGLang and vLLM arms that evalgate launched."
    )

    def kv_pools(self) -> list[KvCapacity]:
        """The KV pool(s) the server stated: SGLang's ``capacity``, then vLLM's ``kv_capacity``."""
        return [pool for pool in (self.capacity, self.kv_capacity) if pool is not None]
