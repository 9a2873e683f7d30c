"""An arm served by several workers behind smg is visible to a reviewer (#34): report.html and
summary.md show each such arm's gateway, program, policy and a table of its workers (role, status,
the probe's mean KL, answers routed to each), a PD arm says which suites reached which pool, and
every value from a worker listing is shown escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element

import html5lib

from evalgate.report import render_run
from evalgate.report._gateway import PD_NOTE, WORKER_HEADERS
from evalgate.store.manifest import load_manifest, write_manifest
from tests.helpers.runs import SynthSuite, build_run

SCRIPT = "<script>alert(1)</script>"
W1, W2 = "http://127.0.0.1:18101", "http://127.0.0.1:18102"
ODD = f"http://10.0.0.9:30000/{SCRIPT}"  # a worker URL label as a hostile listing could carry it
PREFILL, DECODE = "http://10.0.0.7:30000", "http://10.0.0.8:30000"

LAUNCHED: dict[str, Any] = {
    "url": "http://127.0.0.1:18200",
    "program": "smg 1.13.0",
    "policy": "consistent_hashing",
    "retries": "off (--disable-retries)",
    "launched": True,
    "workers": [
        {"url": W1, "role": "regular", "status": "ready", "healthy": True, "command": ["llama-server"]},
        {"url": W2, "role": "regular", "status": "ready", "healthy": True, "command": ["llama-server"]},
    ],
    "probe": {
        W1: {"positions": 40, "identical": True, "mean_kld": 0.0, "top1_agree": "40/40", "role": "regular"},
        W2: {
            "positions": 40,
            "identical": False,
            "mean_kld": 3.2e-06,
            "top1_agree": "40/40",
            "role": "regular",
        },
    },
    "routed": {W1: 12, W2 + "/": 8},
}
PD: dict[str, Any] = {
    "url": "http://gateway.internal:30000",
    "attached": True,
    "policy": "the gateway's own",
    "workers": [
        {"url": PREFILL, "role": "prefill", "status": "ready", "healthy": True, "bootstrap_port": 8998},
        {"url": ODD, "role": "prefill", "status": "ready", "healthy": False},
        {"url": DECODE, "role": "decode", "status": "ready", "healthy": True},
    ],
    "probe": {PREFILL: {"positions": 40, "identical": True, "mean_kld": 0.0, "role": "prefill"}},
    "routed": {DECODE: 20, "?": 1},
}


def _run(root: Path, gateways: dict[str, dict[str, Any]]) -> Path:
    run_dir = build_run(root, [SynthSuite("arc_easy", (10, 1, 1, 8), kind="loglikelihood")])
    manifest = load_manifest(run_dir)
    for arm, gateway in gateways.items():
        manifest.arms[arm].server.gateway = gateway
    write_manifest(run_dir, manifest)
    render_run(run_dir)
    return run_dir


def _text(el: Element) -> str:
    return "".join(el.itertext()).strip()


def _worker_tables(page: str) -> list[list[list[str]]]:
    """Every workers table of the page (its header row is ``WORKER_HEADERS``), as cell texts."""
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    tables = []
    for table in doc.iter("table"):
        if [_text(th) for th in table.iter("th")] == WORKER_HEADERS:
            body = table.find("tbody")
            assert body is not None
            tables.append([[_text(td) for td in tr] for tr in body.iter("tr")])
    return tables


def test_each_gateway_arm_shows_its_workers_policy_and_pools_escaped(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run", {"baseline": LAUNCHED, "candidate": PD})
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    baseline, candidate = _worker_tables(page)
    assert baseline == [
        [W1, "regular", "ready", "0 (identical)", "12"],
        [W2, "regular", "ready", "3.2e-06", "8"],  # smg's header had a trailing slash
    ]
    assert candidate == [
        [PREFILL, "prefill", "ready", "0 (identical)", "0"],
        [ODD, "prefill", "ready (unhealthy)", "not probed", "0"],
        [DECODE, "decode", "ready", "not probed", "20"],
        ["?", "", "not listed by the gateway", "", "1"],
    ]
    assert SCRIPT not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<h4 id="gateway-baseline">baseline: 2 workers behind smg</h4>' in page
    assert '<h4 id="gateway-candidate">candidate: 3 workers behind smg</h4>' in page
    for fact in (
        "http://127.0.0.1:18200",
        "smg 1.13.0",
        "consistent_hashing",
        "http://gateway.internal:30000",
    ):
        assert f'<td class="mono">{fact}</td>' in page
    # the PD line belongs to the candidate (prefill/decode) alone
    assert page.count(PD_NOTE) == 1
    assert page.index(PD_NOTE) > page.index('id="gateway-candidate"')

    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert SCRIPT not in summary and "&lt;script&gt;alert(1)&lt;/script&gt;" in summary
    assert "#### baseline: 2 workers behind smg" in summary
    assert f"| {W1} | regular | ready | 0 (identical) | 12 |" in summary
    assert f"| {DECODE} | decode | ready | not probed | 20 |" in summary
    assert "policy consistent\\_hashing" in summary and "program smg 1.13.0" in summary
    assert summary.count(PD_NOTE) == 1


def test_an_arm_of_regular_workers_has_no_pool_line_and_plain_arms_no_gateway(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "one", {"candidate": LAUNCHED})
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert len(_worker_tables(page)) == 1 and 'id="gateway-candidate"' in page
    assert 'id="gateway-baseline"' not in page and PD_NOTE not in page

    plain = _run(tmp_path / "plain", {})
    page = (plain / "report.html").read_text(encoding="utf-8")
    assert 'id="gateways"' not in page and not _worker_tables(page)
    assert "behind smg" not in (plain / "summary.md").read_text(encoding="utf-8")
