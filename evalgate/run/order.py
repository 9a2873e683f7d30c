"""The order of service: each item's place in the sequence of requests its server was sent.

Accuracy that decays with the requests a server has served (a pool that fills, a cached prefix
read back wrong, a worker that degrades after its first N requests) is invisible in a suite's total
and in a record that only says what came back. So every record says where it stood: which launch
of its arm's server answered it, its sequence number among the items sent to that launch, when it
was sent and finished (UTC epoch seconds), and how many other items were in flight when it was
sent. Preflight and the drift suite's reads are not counted: ``seq`` orders the items.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["ServiceOrder"]


@dataclass
class ServiceOrder:
    """One group of launched (or attached) servers: per arm, the next sequence number and the items
    in flight. A relaunch (a resume, the baseline launched again for the drift reads) is a new
    ``ServiceOrder`` with its own ``launch``, so each launch's sequence starts at 0."""

    launch: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    """The UTC time the group's servers were taken up: the launch that served a record."""
    _next: dict[str, int] = field(default_factory=dict)
    _flying: dict[str, int] = field(default_factory=dict)

    @contextlib.contextmanager
    def serve(self, arm: str) -> Iterator[dict[str, float | int | str]]:
        """Around one item's requests on ``arm``: yields the facts so far, which gain ``done`` when
        the block ends (the record's ``extra.served``)."""
        seq = self._next.get(arm, 0)
        self._next[arm] = seq + 1
        flying = self._flying.get(arm, 0)
        self._flying[arm] = flying + 1
        facts: dict[str, float | int | str] = {
            "launch": self.launch, "seq": seq, "in_flight": flying, "sent": round(time.time(), 3),
        }  # fmt: skip
        try:
            yield facts
        finally:
            self._flying[arm] -= 1
            facts["done"] = round(time.time(), 3)
