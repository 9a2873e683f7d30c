"""Probes of one running server that are not a comparison of two arms: whether its shared prefix
cache isolates tenants (``cache``), and whether its answers depend on that cache (``warm_cold``);
``report`` renders either's probe.json (summary line, junit.xml, summary.md, probe.html)."""

from evalgate.probe.cache import (
    EXIT_CODES,
    ProbeSettings,
    decide,
    no_isolation_report,
    run_cache_probe,
)
from evalgate.probe.report import junit_xml, probe_html, summary_line, summary_md
from evalgate.probe.warm_cold import (
    DEFAULT_SUITES,
    WarmColdResult,
    WarmColdSettings,
    run_warm_cold,
    warm_cold_report,
)

__all__ = [
    "DEFAULT_SUITES",
    "EXIT_CODES",
    "ProbeSettings",
    "WarmColdResult",
    "WarmColdSettings",
    "decide",
    "junit_xml",
    "no_isolation_report",
    "probe_html",
    "run_cache_probe",
    "run_warm_cold",
    "summary_line",
    "summary_md",
    "warm_cold_report",
]
