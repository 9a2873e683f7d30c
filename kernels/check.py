"""`evalgate kernels check`: numerics of every kernel against float64, with pass thresholds.

Each case runs the PyTorch reference and the Triton kernel on seeded data with outliers and scores
both against the float64 result of the unquantized (BF16) operation: max abs error, relative
Frobenius error, cosine similarity and SQNR. A row passes when SQNR clears the case's threshold
and, for Triton rows, when the Triton output agrees with the reference (`sqnr_vs_ref_db`). On a
GPU each kernel is also timed against its BF16 counterpart. With fp8_kv, the report also sets
the reference's two e4m3 roundings side by side (nearest and toward zero, `RoundingRow`; not
gated), so that a format's cost and an implementation's are told apart.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from evalgate.kernels._cases import Case, Ctx, Result, cases
from evalgate.kernels._names import FAULTS, FP8_KV, KERNEL_NAMES, validate_kernel_names
from evalgate.kernels._roundings import RoundingRow, format_roundings, rounding_rows
from evalgate.kernels._triton import interpreting, use_interpreter_if_no_gpu
from evalgate.kernels.metrics import error_metrics, sqnr_db

AGREEMENT_MIN_DB = 40.0
"""Triton vs reference: both round to BF16 at the end, so they may differ by one BF16 ulp (~2**-9
relative, about 54 dB); a real kernel bug (wrong nibble, group, head or page) costs far more."""

__all__ = [
    "AGREEMENT_MIN_DB",
    "FAULTS",
    "CheckReport",
    "CheckRow",
    "RoundingRow",
    "TimingRow",
    "format_table",
    "run_check",
]


@dataclass(frozen=True)
class CheckRow:
    """One kernel implementation on one shape, scored against float64."""

    kernel: str
    """Kernel family: fp8_kv or int4."""
    name: str
    """Operation, e.g. fp8_kv.decode or int4.w4a16."""
    impl: str
    """reference (PyTorch, float32 math) or triton."""
    shape: str
    """Human-readable shape and options."""
    metrics: Mapping[str, float]
    """max_abs, rel_fro, cosine, sqnr_db against float64; sqnr_vs_ref_db for Triton rows."""
    threshold: Mapping[str, float]
    """Minimum value per metric for the row to pass."""
    passed: bool


@dataclass(frozen=True)
class TimingRow:
    """GPU time of a kernel and its BF16 counterpart (ratio = kernel / bf16, lower is faster)."""

    name: str
    shape: str
    kernel_ms: float
    bf16_ms: float
    ratio: float


@dataclass(frozen=True)
class CheckReport:
    """All rows of one check run plus the context needed to reproduce it."""

    rows: tuple[CheckRow, ...]
    timings: tuple[TimingRow, ...]
    roundings: tuple[RoundingRow, ...]
    """e4m3 nearest vs toward zero on the same K/V (with fp8_kv; information, not gated)."""
    kernels: tuple[str, ...]
    device: str
    triton_mode: str
    """compiled (GPU) or interpreter (TRITON_INTERPRET=1)."""
    seed: int
    fault: str | None
    """Injected fault (self-test), None in a real check."""
    elapsed_s: float
    versions: Mapping[str, str]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (non-finite floats become strings "inf", "-inf", "nan")."""
        d = asdict(self)
        d["passed"] = self.passed
        return _jsonable(d)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, Mapping):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _passes(metrics: Mapping[str, float], threshold: Mapping[str, float]) -> bool:
    return all(metrics.get(k, math.nan) >= v for k, v in threshold.items())  # NaN fails


def _score(case: Case, result: Result) -> list[CheckRow]:
    rows = []
    ref = result.outputs.get("reference")
    for impl, out in result.outputs.items():
        metrics = error_metrics(out, result.truth)
        threshold = {"sqnr_db": case.min_sqnr_db}
        if impl != "reference" and ref is not None:
            metrics["sqnr_vs_ref_db"] = sqnr_db(out, ref)
            threshold["sqnr_vs_ref_db"] = AGREEMENT_MIN_DB
        rows.append(
            CheckRow(
                case.kernel, case.name, impl, case.shape, metrics, threshold, _passes(metrics, threshold)
            )
        )
    return rows


def _time(case: Case, result: Result) -> TimingRow | None:
    if result.bench is None:
        return None
    from triton.testing import do_bench

    kernel_ms = float(do_bench(result.bench[0]))
    bf16_ms = float(do_bench(result.bench[1]))
    return TimingRow(case.name, case.shape, kernel_ms, bf16_ms, kernel_ms / bf16_ms)


def _versions() -> dict[str, str]:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}


def run_check(
    *,
    device: str | torch.device | None = None,
    seed: int = 0,
    kernels: Sequence[str] | None = None,
    fault: str | None = None,
) -> CheckReport:
    """Run every case of the chosen kernels (all by default) on `device` (cuda when available).

    On CPU the Triton kernels run in the interpreter with small shapes; on a GPU, full shapes
    and timings. `fault` injects a known bug (see FAULTS) to prove the check catches it.
    """
    names = validate_kernel_names(list(kernels) if kernels is not None else list(KERNEL_NAMES))
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda requested but torch sees no CUDA GPU; use --device cpu")
    if dev.type == "cpu":
        use_interpreter_if_no_gpu(force=True)  # before triton and our kernel modules are imported
    ctx = Ctx(device=dev, seed=seed, full=dev.type == "cuda" and not interpreting(), fault=fault)
    start = time.perf_counter()
    rows: list[CheckRow] = []
    timings: list[TimingRow] = []
    for name in names:
        for case in cases(name, full=ctx.full):
            result = case.run(ctx)
            rows.extend(_score(case, result))
            timing = _time(case, result) if ctx.full else None
            if timing is not None:
                timings.append(timing)
    roundings = rounding_rows(ctx) if FP8_KV in names else ()
    return CheckReport(
        rows=tuple(rows),
        timings=tuple(timings),
        roundings=roundings,
        kernels=names,
        device=str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev),
        triton_mode="interpreter" if interpreting() else "compiled",
        seed=seed,
        fault=fault,
        elapsed_s=time.perf_counter() - start,
        versions=_versions(),
    )


def _fmt(x: float, spec: str) -> str:
    return f"{x:{spec}}" if math.isfinite(x) else str(x)


def format_table(report: CheckReport) -> str:
    """Plain-text table of the rows (timings on a GPU, e4m3 roundings with fp8_kv) and a verdict line."""
    head = f"{'kernel':<20} {'impl':<9} {'shape':<44} {'max_abs':>9} {'rel_fro':>9} {'cosine':>8} {'SQNR dB':>8} {'min':>5} {'vs ref':>7}  ok"
    lines = [head, "-" * len(head)]
    for r in report.rows:
        m = r.metrics
        vs_ref = _fmt(m["sqnr_vs_ref_db"], ".1f") if "sqnr_vs_ref_db" in m else "-"
        lines.append(
            f"{r.name:<20} {r.impl:<9} {r.shape:<44} {_fmt(m['max_abs'], '9.2e')} {_fmt(m['rel_fro'], '9.2e')} "
            f"{_fmt(m['cosine'], '8.5f')} {_fmt(m['sqnr_db'], '8.2f')} {r.threshold['sqnr_db']:5.0f} "
            f"{vs_ref:>7}  {'ok' if r.passed else 'FAIL'}"
        )
    if report.timings:
        lines += ["", f"{'kernel':<20} {'shape':<44} {'kernel ms':>10} {'bf16 ms':>10} {'ratio':>7}"]
        for t in report.timings:
            lines.append(f"{t.name:<20} {t.shape:<44} {t.kernel_ms:10.4f} {t.bf16_ms:10.4f} {t.ratio:7.2f}")
    if report.roundings:
        lines += ["", *format_roundings(report.roundings)]
    failed = sum(not r.passed for r in report.rows)
    verdict = "PASS" if report.passed else f"FAIL ({failed} of {len(report.rows)} rows)"
    fault = f", fault={report.fault}" if report.fault else ""
    lines += [
        "",
        f"{verdict}: {len(report.rows)} rows on {report.device} (Triton {report.triton_mode}, seed "
        f"{report.seed}{fault}) in {report.elapsed_s:.1f} s",
    ]
    return "\n".join(lines)
