"""What a candidate buys: a closed-loop load sweep per arm (output tok/s, request/s, TTFT, ITL)
and each arm's KV capacity, written as throughput.json.

``sweep`` drives the levels; the built-in load generator (``_loadgen``) or SGLang's own
``bench_serving`` (``_sglang_bench_serving``) sends the requests. ``evalgate bench`` and
``evalgate compare --with-throughput`` call this package; ``evalgate.report.throughput_svg``
renders its output. Not to be confused with ``benchmarks/``, which measures evalgate itself.
"""

from evalgate.throughput.sweep import (
    DEFAULT_LEVELS,
    THROUGHPUT_SCHEMA,
    BenchSettings,
    Target,
    capped_levels,
    check_target,
    finish_compare,
    measure_handle,
    run_sweep,
    sweep,
    throughput_doc,
    write_throughput,
)

__all__ = [
    "DEFAULT_LEVELS",
    "THROUGHPUT_SCHEMA",
    "BenchSettings",
    "Target",
    "capped_levels",
    "check_target",
    "finish_compare",
    "measure_handle",
    "run_sweep",
    "sweep",
    "throughput_doc",
    "write_throughput",
]
