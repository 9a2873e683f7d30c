"""The compare loop's progress display: one bar per arm and suite, with the running accuracy."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evalgate.store.records import Record

__all__ = ["LiveAccuracy", "progress_bars"]


def progress_bars(console: Console) -> Progress:
    """The bars' columns: what runs, how far, for how long, the running accuracy, a state note."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[acc]}"),
        TextColumn("{task.fields[state]}"),
        console=console,
        transient=False,
    )


class LiveAccuracy:
    """The running mean of a suite's primary metric on one arm, for its progress bar (sgl-eval
    shows one): a collapse shows minutes into a long run, not at its end. Failed items (no
    metric) are left out; only the number is shown, never item text (private suites too)."""

    def __init__(self, metric: str, records: Iterable[Record] = ()) -> None:
        self.metric, self.total, self.n = metric, 0.0, 0
        for r in records:
            self.add(r)

    def add(self, record: Record) -> str:
        value = record.metrics.get(self.metric)
        if value is not None and math.isfinite(value):
            self.total, self.n = self.total + float(value), self.n + 1
        return self.text

    @property
    def text(self) -> str:
        return f"{self.metric.split(',')[0]} {self.total / self.n:.3f}" if self.n else ""
