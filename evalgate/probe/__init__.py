"""Probes of one running server that are not a comparison of two arms: whether its shared prefix
cache isolates tenants (``cache``), and whether its answers depend on that cache."""

from evalgate.probe.cache import (
    EXIT_CODES,
    ProbeSettings,
    decide,
    junit_xml,
    no_isolation_report,
    run_cache_probe,
    summary_line,
)

__all__ = [
    "EXIT_CODES",
    "ProbeSettings",
    "decide",
    "junit_xml",
    "no_isolation_report",
    "run_cache_probe",
    "summary_line",
]
