"""From a run folder's files alone (manifest + records) to a verdict: the same code path for
``evalgate compare`` and ``evalgate report``, so a re-render always reproduces the verdict.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from evalgate.arms import compared_ids, repeat_ids
from evalgate.errors import EvalgateError
from evalgate.gate._agreement import no_answer
from evalgate.gate._answers import answers_for
from evalgate.gate._capacity import capacity_note
from evalgate.gate._categories import categories_for
from evalgate.gate._comparable import comparability
from evalgate.gate._decide import decide
from evalgate.gate._flip_drift import flip_drift
from evalgate.gate._kernel_check import kernel_failures
from evalgate.gate._model import Verdict
from evalgate.gate._output_lengths import output_lengths_for
from evalgate.gate._policy import GatePolicy, sequential_rule
from evalgate.gate._repeatability import noisier_note, repeatability_for
from evalgate.gate._repeats import item_means, repeat_summary
from evalgate.gate._what_ran import baseline_fp8_note, what_ran_for
from evalgate.stats.sequential import outcomes, summary_note
from evalgate.store.drift_records import record_check
from evalgate.store.manifest import Manifest, load_manifest
from evalgate.store.records import Pair, RecordStore, errors_as_wrong, pair_records

__all__ = ["NO_ANSWER_LIMIT", "REFERENCE_ERROR_LIMIT", "RunData", "load_run", "verdict_for"]

REFERENCE_ERROR_LIMIT = 0.02
"""``--errors-as-wrong``: the share of a suite's items that may fail on the baseline (or the A/A
arm) and still count as wrong there. Beyond it the baseline is no reference (failing on both arms
would pair as agreement): the suite is an ERROR row and the run exits 3. Without the flag any
failed item makes the run incomplete (exit 3); a candidate's failures count as wrong, unlimited."""

NO_ANSWER_LIMIT = 0.5
"""The share of a generation suite's records on which the baseline (or the A/A arm) may give no
answer (empty text, null chat content, no extractable answer, or a failed item) and still be a
reference. Two arms that both answer nothing agree on every item, so their accuracy, flips and
unanswered rates all show "no significant difference": a PASS that says nothing of the candidate.
Beyond half, most of what the gate compares is the silence itself, so the suite is an ERROR row
and the run exits 3, in every mode (plain, --repeats, chat, sequential). A weak model that fails
to extract an answer on some items stays well below it (SmolLM2-135M: 8 % on gsm8k)."""


class RunData:
    """A run's manifest and its paired records per suite."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.manifest: Manifest = load_manifest(self.dir)
        self.arm_names: list[str] = list(self.manifest.arm_names)
        store = RecordStore(self.dir, run_id=self.manifest.run_id)
        self.records = {
            suite: {arm: store.load(suite, arm, check=record_check(meta)) for arm in self.arm_names}
            for suite, meta in self.manifest.suites.items()
        }
        self.errors_as_wrong = self.manifest.request.errors_as_wrong
        if self.errors_as_wrong:  # an item that failed after retries scores 0 on that arm
            for suite, arms in self.records.items():
                metrics = self.manifest.suites[suite].metrics
                if self.manifest.suites[suite].metric_kind == "drift":
                    continue  # a failed document has no log-likelihood to count as "wrong"
                for arm, recs in arms.items():
                    arms[arm] = errors_as_wrong(recs, metrics)
        self.pairs: dict[str, list[Pair]] = {}
        self.missing: dict[str, int] = {}
        self.aa_pairs: dict[str, list[Pair]] = {}
        self.candidate_repeat_pairs: dict[str, list[Pair]] = {}
        """--aa both: per suite, the candidate's records paired with its repeat's (a subset of items)."""
        self.unplanned: dict[str, list[str]] = {}
        """suite -> item ids recorded (any arm) that the manifest never planned: never scored."""
        for suite, meta in self.manifest.suites.items():
            planned = set(meta.item_ids)
            arms = {
                arm: {key: r for key, r in recs.items() if r.item_id in planned}
                for arm, recs in self.records[suite].items()
            }
            stray = {r.item_id for recs in self.records[suite].values() for r in recs.values()} - planned
            if stray:
                self.unplanned[suite] = sorted(stray)
                self.records[suite] = arms
            pairs = pair_records(arms["baseline"].values(), arms["candidate"].values(), suite=suite)
            self.pairs[suite] = pairs
            expected = meta.n * max(1, self.manifest.request.repeats)  # a record per item per repeat
            self.missing[suite] = expected - len(pairs)
            if "aa" in arms:
                aa = pair_records(arms["baseline"].values(), arms["aa"].values(), suite=suite)
                self.aa_pairs[suite] = aa
                self.missing[suite] += expected - len(aa)
            if "aa_candidate" in arms:  # --aa both: the candidate's repeat runs the first --aa-items
                again = pair_records(arms["candidate"].values(), arms["aa_candidate"].values(), suite=suite)
                self.candidate_repeat_pairs[suite] = again
                mine = repeat_ids(meta.item_ids, "aa_candidate", self.manifest.request.aa_items)
                self.missing[suite] += len(mine) * max(1, self.manifest.request.repeats) - len(again)
        self.sequential: dict[str, Any] = {}
        if self.manifest.sequential:  # a suite that stopped early needs only its used items (no --aa here)
            self.sequential = outcomes(self, sequential_rule(self.manifest))
            for suite, out in self.sequential.items():
                used = set(self.manifest.suites[suite].item_ids[: out.used])
                self.pairs[suite] = [p for p in self.pairs[suite] if p.item_id in used]
                self.missing[suite] = 0 if out.decision != "running" else out.planned - len(self.pairs[suite])

    def broken_references(self) -> dict[str, str]:
        """``--errors-as-wrong``: suite -> why its baseline (or A/A arm) failed too many items."""
        out = {}
        for suite, arms in self.records.items():
            n = self.manifest.suites[suite].n
            for arm in ("baseline", "aa"):
                failed = [r for r in arms.get(arm, {}).values() if r.extra.error is not None]
                if n and len(failed) > REFERENCE_ERROR_LIMIT * n:
                    first = _one_line(str(failed[0].extra.error))
                    out[suite] = (
                        f"{suite}: the {arm} failed {len(failed)} of {n} items (more than "
                        f"{REFERENCE_ERROR_LIMIT:.0%}), so it is no reference; first: {first}"
                    )
                    break
        return out

    def silent_references(self) -> dict[str, str]:
        """suite -> why its baseline (or A/A arm) answered nothing on more than ``NO_ANSWER_LIMIT``
        of a generation suite's records (log-likelihood and drift suites always answer)."""
        out = {}
        for suite, arms in self.records.items():
            meta = self.manifest.suites[suite]
            if meta.kind == "loglikelihood" or meta.metric_kind == "drift":
                continue
            for arm in ("baseline", "aa"):
                recs = list(arms.get(arm, {}).values())
                silent = [r for r in recs if r.error or r.extra.error is not None or no_answer(r)]
                if recs and len(silent) > NO_ANSWER_LIMIT * len(recs):
                    out[suite] = (
                        f"{suite}: the {arm} gave no answer (empty, null or failed) on {len(silent)} of "
                        f"{len(recs)} records ({len(silent) / len(recs):.0%}, more than {NO_ANSWER_LIMIT:.0%}), "
                        "so it is no reference: two arms that answer nothing agree on every item"
                    )
                    break
        return out

    def failed_suites(self) -> dict[str, str]:
        """suite -> its item errors (any arm) with the first one's cause; none with --errors-as-wrong."""
        out = {}
        for suite, arms in self.records.items():
            failed = [(arm, r) for arm, recs in arms.items() for r in recs.values() if r.error]
            if failed:
                arm, r = failed[0]
                out[suite] = f"{len(failed)} item error(s), first on the {arm}: {_one_line(str(r.error))}"
        return out

    def error_summary(self) -> str:
        """Item errors per arm with the first one's cause, on one line."""
        count: Counter[str] = Counter()
        first: dict[str, str] = {}
        for suite, arms in self.records.items():
            for arm, recs in arms.items():
                for r in recs.values():
                    if r.error:
                        count[arm] += 1
                        first.setdefault(arm, f"{suite}/{r.item_id}: {_one_line(r.error)}")
        return "; ".join(f"{k} item error(s) on the {arm} (first {first[arm]})" for arm, k in count.items())

    def errors(self) -> list[str]:
        return [
            f"{suite}/{arm}/{r.item_id}: {r.error}"
            for suite, arms in self.records.items()
            for arm, recs in arms.items()
            for r in recs.values()
            if r.error
        ]


def load_run(run_dir: Path) -> RunData:
    return RunData(run_dir)


def verdict_for(run: RunData, *, policy: GatePolicy | None = None) -> Verdict:
    """The verdict; ERROR (not a partial PASS) when items are missing or failed."""
    m = run.manifest
    policy = policy or GatePolicy.from_request(m.request)
    per_suite = {s: (meta.metrics, run.pairs[s]) for s, meta in m.suites.items()}
    aa_pairs = run.aa_pairs if "aa" in run.arm_names else None
    kinds = {s: meta.metric_kind for s, meta in m.suites.items()}
    k = m.request.repeats
    sampled = {s: pairs for s, (_, pairs) in per_suite.items()} if k > 1 else None
    if k > 1:  # sampled: each item's mean over its repeats is one graded outcome per arm
        per_suite = {s: (metrics, item_means(pairs, metrics)) for s, (metrics, pairs) in per_suite.items()}
        if aa_pairs is not None:
            aa_pairs = {s: item_means(p, m.suites[s].metrics) for s, p in aa_pairs.items()}
        kinds = {s: "drift" if kind == "drift" else "continuous" for s, kind in kinds.items()}
    verdict = decide(
        per_suite,
        policy=policy,
        aa_pairs=aa_pairs,
        sequential=run.sequential or None,
        kinds=kinds,
        sampled=sampled,
    )
    generation = [s for s, meta in m.suites.items() if meta.kind != "loglikelihood"]
    first = {s: meta.metrics[0] for s, meta in m.suites.items()}
    verdict.answers = answers_for(run.pairs, first, generation, k)
    if k <= 1:  # by output length: one answer per item and arm (a graded mean has no single length)
        binary = [s for s in generation if m.suites[s].metric_kind == "binary"]
        verdict.output_lengths = output_lengths_for(
            {s: (m.suites[s].metrics, run.pairs[s]) for s in binary}, binary
        )
    if k <= 1:  # by category (gate/_categories.py): one 0/1 outcome per item and arm
        verdict.categories = categories_for(
            {s: (meta.metrics, run.pairs[s]) for s, meta in m.suites.items() if meta.metric_kind == "binary"},
            confidence=1 - policy.alpha,
        )
    verdict.flip_drift = [
        fd
        for s, meta in m.suites.items()
        if meta.kind == "loglikelihood" and meta.metric_kind != "drift"
        for fd in [flip_drift(s, meta.metrics[0], per_suite[s][1])]
        if fd is not None
    ]
    if k > 1:
        for s, meta in m.suites.items():
            if run.pairs[s]:
                verdict.notes.append(
                    repeat_summary(run.pairs[s], meta.metrics[0], k).note(s, meta.metrics[0])
                )
    if run.sequential:
        verdict.notes.append(summary_note(run.sequential))
    errors = run.errors()
    incomplete = {s: k for s, k in run.missing.items() if k > 0}
    advisory = set(policy.advisory)  # an advisory suite that failed is an error row and a note, never ERROR
    held = {s: f"{s}: {k} pair(s) missing" for s, k in incomplete.items() if s in advisory}
    held |= {
        s: f"{s}: item errors"
        for s in advisory
        if s not in held and any(e.startswith(f"{s}/") for e in errors)
    }
    errors = [e for e in errors if e.split("/", 1)[0] not in advisory]
    incomplete = {s: k for s, k in incomplete.items() if s not in advisory}
    if errors or incomplete:
        what = run.error_summary()
        if incomplete:
            what += ("; " if what else "") + ", ".join(
                f"{s} missing {k} pair(s)" for s, k in incomplete.items()
            )
        verdict.verdict = "ERROR"
        verdict.reason = f"the run is incomplete ({what}); resume it to get a verdict"
    if run.unplanned:  # records of items the plan never had: another run's, or edited in
        verdict.verdict = "ERROR"
        verdict.reason = "; ".join(
            [
                *(
                    f"{s} has records of {len(ids)} item id(s) its manifest never planned "
                    f"(e.g. {ids[0]!r}): they are not this run's and were not scored"
                    for s, ids in run.unplanned.items()
                ),
                *([verdict.reason] if errors or incomplete else []),
            ]
        )
    broken = run.broken_references() if run.errors_as_wrong else {}
    broken |= {s: f"{s}: {why}" for s, why in run.failed_suites().items() if s not in broken}
    broken |= {s: why for s, why in run.silent_references().items() if s not in broken}
    held |= {s: why for s, why in broken.items() if s in advisory}
    broken = {s: why for s, why in broken.items() if s not in advisory}
    for row in verdict.suites:
        if row.primary and (row.suite in broken or row.suite in held):
            row.status, row.reason = (
                "error",
                broken.get(row.suite) or f"advisory, not judged: {held[row.suite]}",
            )
    verdict.notes += [f"advisory (not gated): not judged: {why}" for why in held.values()]
    if broken and not (errors or incomplete):  # the reference's failures are the cause: said before decide's
        verdict.verdict = "ERROR"
        verdict.reason = "; ".join(broken.values())
    failed = kernel_failures(m.kernel_check)
    if failed:
        verdict.verdict = "BLOCK"
        verdict.reason = f"the candidate's kernels failed the numerics check: {', '.join(failed[:3])}"
    elif isinstance(m.kernel_check, dict) and m.kernel_check.get("skipped"):
        verdict.notes.append(f"kernel check skipped: {m.kernel_check['skipped']}")
    verdict.notes += _baseline_precision(m) or baseline_fp8_note(m)
    verdict.what_ran, verdict.warnings = what_ran_for(m)  # what the servers reported; fallbacks, --allow-diff
    truncated = _truncated(run)
    if truncated:
        verdict.notes.append(
            "prompts left-truncated to fit the server's context (lm-eval's rule): "
            + ", ".join(f"{s} {k}" for s, k in truncated.items())
        )
    cap = m.request.max_gen_tokens
    if cap and any(meta.kind != "loglikelihood" for meta in m.suites.values()):
        verdict.notes.append(f"generation capped at {cap} tokens on both arms")
    verdict.notes += _cut_by_the_cap(verdict, cap)
    if "aa_candidate" in run.arm_names:  # --aa both: is the candidate the noisy arm? (shown, not gated)
        compared = {s: compared_ids(meta.item_ids, m.request.aa_items) for s, meta in m.suites.items()}
        verdict.repeatability = repeatability_for(
            compared, run.aa_pairs, run.candidate_repeat_pairs, alpha=policy.alpha
        )
        noisy = noisier_note(verdict.repeatability)
        if noisy:
            verdict.notes.append(noisy)
    repeats = {"aa": run.aa_pairs, "aa_candidate": run.candidate_repeat_pairs}
    verdict.comparability = same = comparability(m, run.records, run.pairs, repeats=repeats)
    if same.status == "not comparable" and verdict.verdict != "ERROR" and not failed:
        verdict.reason = (
            f"the arms are not comparable: {'; '.join(same.reasons)}; a verdict on the numerics needs two "
            f"arms that differ in nothing else (it would have been {verdict.verdict}: {verdict.reason})"
        )
        verdict.verdict = "ERROR"
    elif same.status == "inconclusive":
        verdict.notes.append(f"comparability inconclusive: {'; '.join(same.reasons)}")
    capacity = capacity_note(m)
    if capacity:
        verdict.notes.append(capacity)
    return verdict


FULL_PRECISION = ("F16 weights", "BF16 weights", "F32 weights", "the checkpoint's own weights")
FULL_KV = ("F16 KV", "BF16 KV", "F32 KV", "KV auto")


def _baseline_precision(m: Manifest) -> list[str]:
    """The note a reader needs when the baseline is itself quantized (an FP8 or INT4 checkpoint, a
    quantized KV cache): it is no full-precision reference, so "no change" is relative to it."""
    launch = m.launch.get("baseline")
    label = launch.label if launch is not None else None
    if not label:
        return []
    weights, _, kv = label.partition(", ")
    if weights.startswith(FULL_PRECISION) and kv.startswith(FULL_KV):
        return []
    return [f"baseline precision: {label}: not a full-precision reference"]


TRUNCATION_NOTE = 0.05
"""The share of either arm's answers cut at the token cap beyond which the verdict says so: a
failure that grows with output length (FP8 KV in decode) lives past the cap."""


def _cut_by_the_cap(verdict: Verdict, cap: int | None) -> list[str]:
    """A note per generation suite whose cap cut more than ``TRUNCATION_NOTE`` of an arm's answers."""
    out = []
    for a in verdict.answers:
        b, c = a.baseline.truncated, a.candidate.truncated
        if max(b, c) > TRUNCATION_NOTE:
            limit = f"the cap of {cap} tokens" if cap else "the task's own token limit"
            raise_it = "raise --max-gen-tokens" if cap else "raise the task's generation limit"
            out.append(
                f"{a.suite}: {limit} cut {b:.0%} of the baseline's and {c:.0%} of the candidate's answers: "
                f"a failure that grows with output length (an FP8 KV cache read back in decode) can hide "
                f"past it; {raise_it} to see it"
            )
    return out


def _truncated(run: RunData) -> dict[str, int]:
    """Records per suite whose prompt lost tokens to the context limit (either arm)."""
    out = {}
    for suite, arms in run.records.items():
        k = sum(1 for recs in arms.values() for r in recs.values() if r.extra.truncated_tokens)
        if k:
            out[suite] = k
    return out


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def require_complete(run: RunData) -> None:
    errors = run.errors()
    if errors:
        raise EvalgateError(
            f"{len(errors)} item(s) failed after retries; first: {errors[0]}",
            fix=f"rerun with --resume {run.dir} to retry only those items",
        )
