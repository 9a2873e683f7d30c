"""report.html in a real browser: headless Chromium renders it offline, runs its hashed script,
and shows the verdict and every suite. Skipped where /usr/bin/chromium is not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import html5lib
import pytest

from evalgate.report import render_run
from tests.helpers.runs import SynthSuite, build_run

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed (apt-get install chromium)"),
]


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless run with a fresh profile and every network-reaching feature off."""
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_chromium_renders_verdict_and_suites(tmp_path: Path) -> None:
    suites = [
        SynthSuite("gsm8k", (20, 9, 1, 20), text=lambda arm, i, ok: f"<script>alert({i})</script> #### {i}"),
        SynthSuite("arc_easy", (30, 2, 3, 15), kind="loglikelihood", metrics=("acc", "acc_norm")),
    ]
    run_dir = build_run(tmp_path / "run", suites)
    _, verdict = render_run(run_dir)
    url = (run_dir / "report.html").resolve().as_uri()

    shot = tmp_path / "report.png"
    res = _chromium(tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2000", url)
    assert shot.exists() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    res = _chromium(tmp_path / "profile-dom", "--dump-dom", "--virtual-time-budget=2000", url)
    assert res.returncode == 0, res.stderr[-2000:]
    tree = html5lib.parse(res.stdout, namespaceHTMLElements=False)
    text = " ".join(" ".join(tree.itertext()).split())
    assert verdict.verdict == "BLOCK" and "BLOCK" in text
    for s in ("gsm8k", "arc_easy"):
        assert s in text
    assert "<script>alert(25)</script>" in text  # shown as text, never run
    tools = tree.find(".//*[@id='item-tools']")
    assert tools is not None and "hidden" not in tools.attrib  # our script ran under the page's CSP
