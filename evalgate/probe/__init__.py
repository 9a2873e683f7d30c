"""Probes of one running server that are not a comparison of two arms: whether its shared prefix
cache isolates tenants (``cache``), and whether its answers depend on that cache (``warm_cold``).
Each is a ``Probe`` (``run``: the server, the probe, its files); its settings and probe.json are
models in ``evalgate.store.probe_report``; ``report`` renders a probe.json (summary line,
junit.xml, summary.md, probe.html).

How to add a probe: write a class that meets ``Probe`` in a module of its own here (its settings a
pydantic model in ``evalgate.store.probe_report``, whose fields generate its flags; its result one
more kind of ``ProbeReport``), decide PASS / BLOCK / UNDERPOWERED / ERROR with a stated test and
margin (statistics in ``evalgate.stats``), and add its subcommand in ``evalgate.cli.probe``; the
server, the files and the page come from ``run`` and ``report`` unchanged."""

from evalgate.probe.cache import CacheProbe, decide, run_cache_probe
from evalgate.probe.report import (
    EXIT_CODES,
    junit_xml,
    no_isolation_report,
    probe_html,
    summary_line,
    summary_md,
)
from evalgate.probe.run import OUTPUTS, Probe, ProbeServer, run_probe
from evalgate.probe.warm_cold import (
    WarmColdProbe,
    WarmColdResult,
    run_warm_cold,
    suite_prompts,
    warm_cold_report,
)
from evalgate.store.probe_report import DEFAULT_SUITES, ProbeReport, ProbeSettings, WarmColdSettings

__all__ = [
    "DEFAULT_SUITES",
    "EXIT_CODES",
    "OUTPUTS",
    "CacheProbe",
    "Probe",
    "ProbeReport",
    "ProbeServer",
    "ProbeSettings",
    "WarmColdProbe",
    "WarmColdResult",
    "WarmColdSettings",
    "decide",
    "junit_xml",
    "no_isolation_report",
    "probe_html",
    "run_cache_probe",
    "run_probe",
    "run_warm_cold",
    "suite_prompts",
    "summary_line",
    "summary_md",
    "warm_cold_report",
]
