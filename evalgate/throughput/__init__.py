"""What a candidate buys: a closed-loop load sweep per arm (output tok/s, request/s, TTFT, ITL)
and each arm's KV capacity, written as throughput.json.

``sweep`` drives the levels; the built-in load generator (``_loadgen``) or SGLang's own
``bench_serving`` (``evalgate.engines.sglang``) sends the requests. ``evalgate bench`` and
``evalgate compare --with-throughput`` call this package; ``_doc`` holds the throughput.json
document (``ThroughputDoc``) and ``evalgate.report.throughput_svg`` renders it. Not to be
confused with ``benchmarks/``, which measures evalgate itself.
"""

from evalgate.store.throughput import (
    THROUGHPUT_SCHEMA,
    ThroughputDoc,
    throughput_doc,
    write_throughput,
)
from evalgate.throughput.sweep import (
    DEFAULT_LEVELS,
    BenchSettings,
    Target,
    capped_levels,
    check_target,
    finish_compare,
    measure_handle,
    run_sweep,
    sweep,
)

__all__ = [
    "DEFAULT_LEVELS",
    "THROUGHPUT_SCHEMA",
    "BenchSettings",
    "Target",
    "ThroughputDoc",
    "capped_levels",
    "check_target",
    "finish_compare",
    "measure_handle",
    "run_sweep",
    "sweep",
    "throughput_doc",
    "write_throughput",
]
