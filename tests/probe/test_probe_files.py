"""Issue #43, the probe's files: ``probe --out`` never writes through a planted link (exit 2 before
the server starts, the link's target untouched), and probe.html, summary.md and junit.xml show
control and bidirectional characters as escapes, as report.html does."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

import evalgate.probe.run as probe_run
from evalgate.cli import main
from evalgate.engines import ServerHandle
from evalgate.probe import junit_xml, probe_html, summary_md
from evalgate.probe.report import shown
from evalgate.report._format import clean
from tests.probe.sim import SimScorer

HOSTILE = "a\x00b\x1b[31mc\u202eevil\u2066d\x7fe\r\nf\ud800g\ufffe"
RAW = ("\x00", "\x1b", "\u202e", "\u2066", "\x7f", "\r", "\ud800", "\ufffe")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The probe's server, faked: the list of --out folders it was started for."""
    seen: list[Path] = []

    @contextlib.contextmanager
    def server(args: Any, out: Path, **_: Any) -> Any:
        seen.append(out)
        yield ServerHandle("probe", "http://127.0.0.1:1", "", [], out / "log"), SimScorer(honour_salt=False)

    monkeypatch.setattr(probe_run, "_server", server)
    return seen


def probe(out: Path) -> int:
    return main(["probe", "cache", "--engine", "sim", "--out", str(out), "--probes", "4"])


@pytest.mark.parametrize("name", ["probe.json", "junit.xml", "summary.md", "probe.html", "logs/probe.log"])
def test_a_link_planted_in_out_is_refused_and_its_target_untouched(
    name: str, started: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / name).symlink_to(victim)
    assert probe(out) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and name in err
    assert victim.read_text() == "precious\n" and (out / name).is_symlink()
    assert started == []  # refused before the server started
    assert sorted(p.name for p in out.iterdir()) == sorted(["logs", *([name] if "/" not in name else [])])


def test_a_linked_logs_folder_is_refused(started: list[Path], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "logs").symlink_to(elsewhere)
    assert probe(out) == 2 and started == [] and not list(elsewhere.iterdir())


def test_files_of_an_earlier_probe_are_replaced_as_regular_files(started: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "probe.json").write_text("old\n")
    assert probe(out) == 1  # SimScorer without salts: BLOCK
    files = ["junit.xml", "probe.html", "probe.json", "summary.md"]
    assert sorted(p.name for p in out.iterdir()) == files and started == [out]
    assert all(not (out / f).is_symlink() and (out / f).stat().st_nlink == 1 for f in files)
    assert (out / "probe.json").read_text().startswith("{")
    assert not list(out.glob("*.tmp"))
    assert os.stat(out / "probe.json").st_size > 0


def _report() -> dict[str, Any]:
    return {
        "probe": "warm_cold",
        "verdict": "BLOCK",
        "exit_code": 1,
        "reasons": [f"reason {HOSTILE}", "second"],
        "server": f"http://127.0.0.1:1/{HOSTILE}",
        "n": 2,
        "flips": 1,
        "budget": 0.0,
        "pvalue": 0.5,
        "warm_namespace": "salt",
        "seconds": 1.0,
        "items": [{"item": f"i {HOSTILE}", "flip": True, "warm": f"w {HOSTILE}", "cold": f"c {HOSTILE}"}],
        "settings": {"suites": ["tiny"]},
        "conditions": {
            c: {"median_latency_s": 0.1, "cached_tokens_min": 0, "cached_tokens_max": 4}
            for c in ("warm", "cold")
        },
    }


@pytest.mark.parametrize("render", [probe_html, summary_md, junit_xml])
def test_control_and_bidi_characters_are_shown_as_escapes(render: Any) -> None:
    text = render(_report())
    assert not [c for c in RAW if c in text], render.__name__
    assert "\\x00" in text and "\\x1b" in text and "\\u202e" in text and "\\u2066" in text


@pytest.mark.parametrize(
    "text", [HOSTILE, "plain", "tab\tand\nnewline", "\u061c\u200e\u200f\u202a", "\x85\x9f\ufdd0\uffff", ""]
)
def test_the_probes_rule_is_the_reports(text: str) -> None:
    """probe/report.py cannot import report/_format.py (a private module of another package), so
    it holds the same rule: this keeps the two from drifting apart."""
    assert shown(text) == clean(text)


def test_an_out_that_is_a_file_is_exit_2_before_any_server(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#43: `probe --out` naming a file was the catch-all exit 3; it is a usage error naming it."""
    from evalgate.cli import main

    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    code = main(["probe", "warm-cold", "--engine", "llamacpp", "--out", str(afile), "--limit", "1",
                 "--data-dir", str(data_dir)])  # fmt: skip
    assert code == 2 and "not a folder" in capsys.readouterr().err and afile.read_text() == "mine\n"
