"""The typed run folder: each document's model matches its JSON Schema in docs/schemas/, real
and synthetic run folders validate against them, an old (schema 1) run folder still loads,
resumes and renders exactly as it did, and the committed example is what the README's first
command writes today."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from evalgate.cli import build_parser, main
from evalgate.errors import ConfigError
from evalgate.gate import GatePolicy
from evalgate.report import OUTPUTS, render_run
from evalgate.schemas import DOCUMENTS, stale, write
from evalgate.schemas import main as schemas_main
from evalgate.store.manifest import MANIFEST_SCHEMA, load_manifest
from evalgate.store.records import SCHEMA, RecordStore
from evalgate.throughput import BenchSettings, ThroughputDoc, throughput_doc
from tests.helpers.runs import SynthSuite, build_run

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "reports" / "example"  # the README's first command, committed
OLD_RUN = REPO / "tests" / "fixtures" / "schema1_run_bf16_vs_fp8kv"  # a real run with a schema 1 manifest
COMMITTED = sorted(
    p.parent for p in (REPO / "reports").glob("*/manifest.json")
)  # each re-renders byte for byte
SCHEMAS = REPO / "docs" / "schemas"


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8")))


def errors(name: str, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(name).iter_errors(doc)]


def test_schema_files_match_their_models() -> None:
    assert stale(SCHEMAS) == [], "a model changed: regenerate with `python -m evalgate.schemas`"
    assert schemas_main(["--check"]) == 0
    for name in DOCUMENTS:
        Draft202012Validator.check_schema(validator(name).schema)


def test_a_drifted_schema_is_named_and_regenerated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path)
    path = tmp_path / "verdict.schema.json"
    path.write_text(path.read_text().replace('"reliable"', '"reliable_"'))
    assert stale(tmp_path) == [path]
    assert schemas_main(["--check", "--out", str(tmp_path)]) == 1
    assert "verdict.schema.json" in capsys.readouterr().err
    assert schemas_main(["--out", str(tmp_path)]) == 0 and stale(tmp_path) == []


def test_the_old_runs_documents_validate_once_migrated() -> None:
    for path in sorted((OLD_RUN / "items").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            assert errors("record", json.loads(line)) == [], path
    assert errors("verdict", json.loads((OLD_RUN / "verdict.json").read_text())) == []
    migrated = json.loads(json.dumps(load_manifest(OLD_RUN).to_dict(), default=str))
    assert errors("manifest", migrated) == []


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: p.name)
def test_the_committed_runs_validate_and_render_as_committed(run: Path, tmp_path: Path) -> None:
    for path in sorted((run / "items").glob("*.jsonl")):
        assert all(errors("record", json.loads(x)) == [] for x in path.read_text().splitlines()), path
    assert errors("verdict", json.loads((run / "verdict.json").read_text())) == []
    assert errors("manifest", json.loads((run / "manifest.json").read_text())) == []
    copy = shutil.copytree(run, tmp_path / run.name)
    verdict = json.loads((run / "verdict.json").read_text())["verdict"]
    assert main(["report", str(copy)]) == {"PASS": 0, "BLOCK": 1}[verdict]
    for name in (*OUTPUTS, "manifest.json"):
        if name == "report.html" and run != EXAMPLE:  # not committed (gitignored): it renders from these
            assert (copy / name).stat().st_size > 0
        else:
            assert (copy / name).read_bytes() == (run / name).read_bytes(), name


def _first_command() -> list[str]:
    """The README's first command, from `evalgate` on, as argv."""
    block = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)[0]
    return shlex.split(block[block.index("&& evalgate compare ") + len("&& evalgate ") :])


def test_the_committed_example_is_what_the_first_command_writes_today() -> None:
    from evalgate.cli.compare import request_from_args

    wanted = request_from_args(build_parser().parse_args(_first_command()))
    raw = json.loads((EXAMPLE / "manifest.json").read_text())
    assert raw["schema"] == MANIFEST_SCHEMA, (
        "reports/example is an old run: regenerate it (reports/README.md)"
    )
    got = load_manifest(EXAMPLE).request
    fields = ("baseline", "candidate", "suites", "preset", "data_dir", "limit", "seed", "alpha")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(wanted, f) for f in fields}
    assert tuple(raw["suites"]) == wanted.suites


def test_the_first_command_is_read_from_the_readme() -> None:
    """The test above reads the README's command: a misread command must fail here."""
    from evalgate.cli.compare import request_from_args
    from evalgate.request import DEFAULT_SUITES

    argv = _first_command()
    assert argv[:5] == ["compare", "--baseline", "bf16", "--candidate", "fp8kv"], argv
    assert request_from_args(build_parser().parse_args(argv)).suites == DEFAULT_SUITES


def test_a_new_run_folders_documents_validate(tmp_path: Path) -> None:
    cap = {"kv_tokens": 16384, "kv_mib": 360.0, "source": "llama-server log"}
    arm = {"levels": [{"concurrency": 1, "status": "ok", "output_tok_s": 10.0}], "capacity": cap}
    doc = throughput_doc({"baseline": arm, "candidate": arm}, BenchSettings(levels=(1,)))
    assert errors("throughput", doc) == [] and ThroughputDoc.model_validate(doc).to_dict() == doc
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (5, 1, 1, 3))], extra={"throughput": doc})
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["schema"] == MANIFEST_SCHEMA and errors("manifest", manifest) == []
    assert "alpha" not in manifest and manifest["request"]["alpha"] == 0.05  # the request, stored once
    assert manifest["throughput"] == doc
    for path in RecordStore(run).all_paths():
        assert all(errors("record", json.loads(x)) == [] for x in path.read_text().splitlines())
    render_run(run)
    assert errors("verdict", json.loads((run / "verdict.json").read_text())) == []


def test_an_old_run_folder_renders_exactly_as_it_did(tmp_path: Path) -> None:
    old = shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name)
    assert json.loads((old / "manifest.json").read_text())["schema"] == 1
    assert main(["report", str(old)]) == 0
    # report.html is not kept here: the committed runs under reports/ hold the page byte for byte
    assert not (OLD_RUN / "report.html").exists() and (old / "report.html").stat().st_size > 0
    for name in (*OUTPUTS, "manifest.json"):  # a re-render never rewrites the manifest
        if name != "report.html":
            assert (old / name).read_bytes() == (OLD_RUN / name).read_bytes(), name


def test_a_schema_1_manifest_migrates_into_the_request() -> None:
    raw = json.loads((OLD_RUN / "manifest.json").read_text())
    m = load_manifest(OLD_RUN)
    assert m.schema_version == MANIFEST_SCHEMA
    # the top level was what ran: the smoke preset's CPU cap, not the typed request's None
    assert raw["max_gen_tokens"] == 256 and raw["request"]["max_gen_tokens"] is None
    req = m.request
    assert (req.max_gen_tokens, req.seed, req.alpha, req.data_dir) == (
        256,
        1234,
        0.05,
        Path("../shared/data"),
    )
    assert req.suites == ("gsm8k", "arc_easy") and req.suite_options == {}
    assert GatePolicy.from_request(req) == GatePolicy(alpha=0.05, policy="difference")
    stored = m.to_dict()
    assert not {"alpha", "policy", "margin", "seed"} & set(stored) and "tool_prefill" not in stored["request"]


def _write(folder: Path, manifest: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_older_layouts_load_and_unknown_schemas_are_refused(tmp_path: Path) -> None:
    raw = json.loads((OLD_RUN / "manifest.json").read_text())
    raw["request"]["tool_prefill"] = False  # before suite options: a --tool-prefill flag
    assert load_manifest(_write(tmp_path / "a", raw)).request.suite_options == {
        "tool_calls": {"prefill": False}
    }
    no_request = {k: v for k, v in raw.items() if k not in ("request", "arm_names", "margin")}
    m = load_manifest(_write(tmp_path / "b", no_request))  # older still: no recorded request
    assert (m.request.baseline, m.request.candidate, m.request.suites) == (
        "bf16",
        "fp8kv",
        ("gsm8k", "arc_easy"),
    )
    assert m.arm_names == ["baseline", "candidate"] and m.request.margin is None
    with pytest.raises(ConfigError, match="schema 3, expected 2"):
        load_manifest(_write(tmp_path / "c", {**raw, "schema": 3}))
    with pytest.raises(ConfigError, match=r"not a valid manifest: suites\.gsm8k\.n"):
        load_manifest(
            _write(tmp_path / "d", {**raw, "suites": {"gsm8k": {**raw["suites"]["gsm8k"], "n": "x"}}})
        )
    with pytest.raises(ConfigError, match=r"not a valid manifest: throughput"):  # checked as ThroughputDoc
        load_manifest(_write(tmp_path / "e", {**raw, "throughput": {"schema": 1, "levels": "none"}}))


def test_records_are_validated_on_read(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (1, 0, 0, 1))])
    path = RecordStore(run).path("gsm8k", "baseline")
    good = path.read_text().splitlines()[0]
    assert json.loads(good)["schema"] == SCHEMA
    path.write_text(good.replace('"metrics":{', '"metrics":{"x":"wrong",') + "\n")
    with pytest.raises(ConfigError, match="is not a valid record"):
        RecordStore(run).load("gsm8k", "baseline")
    path.write_text(good.replace('"schema":1', '"schema":7') + "\n")
    with pytest.raises(ConfigError, match="record schema 7 is not 1"):
        RecordStore(run).load("gsm8k", "baseline")


def test_resuming_an_old_run_keeps_its_request(tmp_path: Path) -> None:
    from evalgate.cli.compare import request_from_args

    old = shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name)
    parse = build_parser().parse_args
    req = request_from_args(parse(["compare", "--resume", str(old)]))
    assert req.resume == old and req.max_gen_tokens == 256 and req.data_dir == Path("../shared/data")
    assert request_from_args(parse(["compare", "--resume", str(old), "--seed", "1234"])).seed == 1234
    with pytest.raises(ConfigError, match=r"--seed 7 \(the run used 1234\)"):
        request_from_args(parse(["compare", "--resume", str(old), "--seed", "7"]))
    with pytest.raises(ConfigError, match=r"--suite-opt .*prefill"):
        request_from_args(parse(["compare", "--resume", str(old), "--suite-opt", "tool_calls.prefill=true"]))
