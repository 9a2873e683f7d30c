"""Issue #32: ``compare --resume`` continues a run only with the inputs that made its records.

A resume pairs the records made before with those made now as one arm, so every input that
defines an arm is checked against the manifest before anything is asked: the model (its path and
the digest of its file or checkpoint folder), the launch settings and environment, the tokenizer
(at preflight) and, in attach mode, what the servers report they serve. A change is refused with
exit 2 naming it and the fix (a new run). On the fake engine, whose run is interrupted part way;
the digests are of real files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines import Scorer, ServerHandle
from evalgate.engines.fake import FakeEngine
from tests.helpers import hostile_server
from tests.helpers.background import serving
from tests.helpers.exams import yes_exam
from tests.helpers.hostile_server import Hostile, hostile_app

N = 12
Capture = pytest.CaptureFixture[str]


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items q0..q(N-1); the right answer to each is "yes"."""
    return yes_exam(tmp_path / "exam", N)


def config(path: Path, model: Path | str, *, ctx: str = "4096", env: str = "1") -> Path:
    """Both variants with one context size and environment; the candidate's weights at ``model``."""
    table = f'args = {{ "-c" = "{ctx}" }}\nenv = {{ FAKE_THREADS = "{env}" }}\n'
    path.write_text(
        f'[variants.base]\nbase = "bf16"\n{table}\n[variants.mine]\nbase = "fp8"\nmodel = "{model}"\n{table}'
    )
    return path


def stop_after(k: int) -> Callable[[str, str], str]:
    """Answers "yes", and stops the run (Ctrl-C) at the k-th answer."""
    count = {"n": 0}

    def reply(arm: str, prompt: str) -> str:
        count["n"] += 1
        if count["n"] == k:
            raise KeyboardInterrupt
        return "yes"

    return reply


def cut(tmp_path: Path, exam: Path, cfg: Path, use: Any, *, at: int = N + 4) -> Path:
    """A run stopped at the ``at``-th answer (default: mid-candidate): exit 3, records kept."""
    use(FakeEngine(stop_after(at)))
    out = tmp_path / "run"
    argv = ["compare", "--engine", "fake", "--baseline", "base", "--candidate", "mine", "--config", str(cfg),
            "--suites", f"private:{exam}", "--skip-kernel-check", "--out", str(out)]  # fmt: skip
    assert main(argv) == 3
    return out


def resume(out: Path, cfg: Path | None, capsys: Capture, *flags: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["compare", "--resume", str(out), *(["--config", str(cfg)] if cfg else []), *flags])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def refused(code: int, text: str, *names: str) -> None:
    flat = " ".join(text.split())
    assert code == 2, flat
    assert "changed since the run began" in flat and "start a new run" in flat, flat
    for name in names:
        assert name in flat, (name, flat)


def weights(path: Path, fill: bytes) -> Path:
    path.write_bytes(fill * 4096)
    return path


def test_the_same_inputs_resume(tmp_path: Path, exam: Path, use: Any, capsys: Capture) -> None:
    cfg = config(tmp_path / "evalgate.toml", weights(tmp_path / "w.gguf", b"a"))
    out = cut(tmp_path, exam, cfg, use)
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, text = resume(out, cfg, capsys)
    assert code == 0, text


def test_another_model_in_the_variant_is_refused_naming_it(
    tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    first, other = weights(tmp_path / "a.gguf", b"a"), weights(tmp_path / "b.gguf", b"b")
    cfg = config(tmp_path / "evalgate.toml", first)
    out = cut(tmp_path, exam, cfg, use)
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, text = resume(out, config(cfg, other), capsys)
    refused(code, text, "the candidate's model (", "b.gguf")


def test_the_same_path_with_other_bytes_is_refused(
    tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    """The GGUF replaced in place by one of the same size, its modification time set back: the
    memoised digest must not be taken for the new bytes."""
    model = weights(tmp_path / "w.gguf", b"a")
    cfg = config(tmp_path / "evalgate.toml", model)
    out = cut(tmp_path, exam, cfg, use)
    st = model.stat()
    weights(model, b"b")
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert model.stat().st_size == st.st_size and model.stat().st_mtime_ns == st.st_mtime_ns
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, text = resume(out, cfg, capsys)
    refused(code, text, "the candidate's model files (their digest)", "w.gguf")


def test_a_checkpoint_folder_whose_weights_changed_is_refused(
    tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    """A GPU engine's model is a folder: its listing's digest is recorded and compared."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights(folder / "model.safetensors", b"a")
    cfg = config(tmp_path / "evalgate.toml", folder)
    out = cut(tmp_path, exam, cfg, use)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launch"]["candidate"]["model_sha256"]  # recorded for a folder too
    (folder / "model.safetensors").write_bytes(b"b" * 8192)  # other weights
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, text = resume(out, cfg, capsys)
    refused(code, text, "the candidate's model files (their digest)")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ctx": "8192"}, "launch settings (-c 4096 -> 8192)"),
        ({"env": "2"}, "environment (FAKE_THREADS 1 -> 2)"),
    ],
)
def test_other_launch_settings_or_environment_are_refused_naming_them(
    change: dict[str, str], named: str, tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    model = weights(tmp_path / "w.gguf", b"a")
    cfg = config(tmp_path / "evalgate.toml", model)
    out = cut(tmp_path, exam, cfg, use)
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, text = resume(out, config(cfg, model, **change), capsys)
    refused(code, text, f"the baseline's {named}", f"the candidate's {named}")


class Retokenized(FakeEngine):
    """Every arm's server now tokenizes differently (another tokenizer shipped with new weights)."""

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> Scorer:
        scorer = super().scorer(handle, seed=seed)
        scorer.token_offset = 1  # type: ignore[attr-defined]
        return scorer


def test_another_tokenizer_is_refused_at_preflight(
    tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    """Stopped mid-baseline, so no other arm's fingerprint stands beside it: both arms' servers
    now tokenize alike, but not as the baseline's records were made."""
    cfg = config(tmp_path / "evalgate.toml", weights(tmp_path / "w.gguf", b"a"))
    out = cut(tmp_path, exam, cfg, use, at=5)
    engine = use(Retokenized(lambda arm, prompt: "yes"))
    code, text = resume(out, cfg, capsys)
    refused(code, text, "the baseline's tokenizer (fingerprint")
    assert not [c for c in engine.calls if c.kind == "chat"]  # no item asked of it
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["baseline"]["tokenizer_fingerprint"]  # the original one, kept


# -- attach mode: the servers themselves say what they serve -------------------------------------


@pytest.fixture
def stub() -> Iterator[Callable[..., Hostile]]:
    with serving(Hostile, hostile_app) as start:
        yield start


@pytest.mark.parametrize("other", [False, True], ids=["same model", "another model"])
def test_an_attached_arm_now_serving_another_model_is_refused(
    other: bool,
    stub: Callable[..., Hostile],
    data_dir: Path,
    tmp_path: Path,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The candidate's items failed (its server returned NaN), so the run is resumed against the
    same URL, where the server was restarted: with the same model (resumed), or another one."""
    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)
    props = dict(hostile_server.PROPS)  # what both stubs' /props serve, changed below
    monkeypatch.setattr(hostile_server, "PROPS", props)
    base, cand = stub("good"), stub("nan")
    out = tmp_path / "run"
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check", "--suites",
            "arc_easy", "--limit", "5", "--data-dir", str(data_dir), "--baseline-url", base.url,
            "--candidate-url", cand.url, "--out", str(out)]  # fmt: skip
    assert main(argv) == 3
    cand.mode = "good"
    if other:
        props["model_path"] = "/models/another.gguf"
    code, text = resume(out, None, capsys)
    if not other:
        assert code in (0, 1), text
        return
    refused(code, text, "what the candidate's servers serve (model_path)", "/models/another.gguf")


def test_a_secret_in_the_environment_is_recorded_as_a_digest_and_still_compared(
    tmp_path: Path, exam: Path, use: Any, capsys: Capture
) -> None:
    """A variant's HF_TOKEN reaches the server, never the manifest; a resume with another token
    is still refused (the digests differ)."""
    model = weights(tmp_path / "w.gguf", b"a")
    cfg = tmp_path / "evalgate.toml"

    def write(token: str) -> Path:
        table = f'env = {{ HF_TOKEN = "{token}", FAKE_THREADS = "1" }}\n'
        cfg.write_text(
            f'[variants.base]\nbase = "bf16"\n{table}\n[variants.mine]\nbase = "fp8"\nmodel = "{model}"\n{table}'
        )
        return cfg

    out = cut(tmp_path, exam, write("hf_first-secret-value"), use)
    text = (out / "manifest.json").read_text()
    env = dict(json.loads(text)["launch"]["candidate"]["env"])
    assert "hf_first-secret-value" not in text and env["HF_TOKEN"].startswith("sha256:")
    use(FakeEngine(lambda arm, prompt: "yes"))
    code, printed = resume(out, write("hf_other-secret-value"), capsys)
    refused(code, printed, "the baseline's environment (HF_TOKEN sha256:")
    assert "secret-value" not in printed
