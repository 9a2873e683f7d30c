"""The manifest changes only through its verbs: no module outside evalgate/store/ sets a manifest's
attributes (an AST scan), and each verb sets what it says and survives a write and a load."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalgate.store.manifest import ArmInfo, Manifest, ServerFacts, load_manifest, write_manifest
from evalgate.throughput import finish_compare

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "evalgate"
EXAMPLE = REPO / "reports" / "example"
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove"}
TYPES = {"Manifest", "ArmInfo", "ServerFacts", "SequentialInfo"}


def _chain(node: ast.AST) -> list[ast.AST]:
    """``a.b[c].d(...)`` -> the nodes from the outermost down to the name ``a``."""
    out = [node]
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
        out.append(node)
    return out


def _reaches(node: ast.AST, aliases: set[str]) -> bool:
    """Whether ``node`` is (part of) a manifest: a ``.manifest`` on the way, or a name bound to one."""
    for n in _chain(node):
        if isinstance(n, ast.Attribute) and n.attr == "manifest":
            return True
        if isinstance(n, ast.Name) and (n.id == "manifest" or n.id in aliases):
            return True
    return False


def _annotated(arg: ast.arg) -> bool:
    return arg.annotation is not None and any(t in ast.unparse(arg.annotation) for t in TYPES)


def manifest_writes(source: str) -> list[str]:
    """Each statement of ``source`` that changes a manifest other than through a method of it."""
    found: list[str] = []
    scopes: list[ast.AST] = [ast.parse(source)]
    while scopes:
        scope = scopes.pop()
        aliases: set[str] = set()
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = scope.args
            aliases |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if _annotated(a)}
        body = [n for n in ast.walk(scope) if n is not scope]
        for node in body:  # names bound to a part of the manifest (``info = plan.manifest.arms[arm]``)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _reaches(node.value, aliases) or (
                    isinstance(node.value, ast.Call) and ast.unparse(node.value.func) in TYPES
                ):
                    aliases |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in body:
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = list(node.targets)
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                    if _reaches(node.args[0], aliases):
                        found.append(ast.unparse(node))
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in MUTATORS
                    and _reaches(func.value, aliases)
                ):
                    if isinstance(func.value, (ast.Attribute, ast.Subscript)):  # a manifest's field, mutated
                        found.append(ast.unparse(node))
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _reaches(t.value, aliases):
                    found.append(f"{ast.unparse(t)} = ...")
        scopes += [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    return found


def test_no_module_outside_the_store_sets_a_manifests_attributes() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "store" in path.parents:
            continue
        writes = manifest_writes(path.read_text(encoding="utf-8"))
        if writes:
            offenders[str(path.relative_to(REPO))] = writes
    assert offenders == {}, "use the Manifest's verbs (evalgate/store/manifest.py)"


@pytest.mark.parametrize(
    "code",
    [
        "def f(plan):\n    plan.manifest.finished_utc = now()",
        "def f(plan):\n    plan.manifest.arms[arm].durations_s[s] = 1.0",
        "def f(plan):\n    info = plan.manifest.arms[arm]\n    info.preflight = []",
        "def f(plan):\n    info = plan.manifest.arms.setdefault(arm, ArmInfo())\n    info.pid = 1",
        "def f(plan):\n    plan.manifest.arms[arm].server.setdefault('cache_flush', {})[s] = 'flushed'",
        "def f(plan):\n    plan.manifest.sequential.suites[s] = {}",
        "def f(manifest):\n    manifest.imported = {}",
        "def f(m: Manifest):\n    m.host = None",
        "def f(m: Manifest):\n    m.arms.update({})",
        "def f(plan):\n    setattr(plan.manifest, 'host', None)",
        "def f():\n    m = Manifest(**x)\n    m.finished_utc = 'x'",
    ],
)
def test_the_scan_finds_each_way_of_setting_one(code: str) -> None:
    assert manifest_writes(code), code


def test_the_scan_leaves_reads_verbs_and_other_objects_alone() -> None:
    code = """
def f(plan, other):
    plan.manifest = load()
    plan.manifest.arm_launched(arm, command=[], server={}, pid=None)
    variant = plan.manifest.variants[arm].name
    done = (plan.manifest.throughput or {}).get("arms")
    other.finished_utc = 1
    prints = {a: i.tokenizer_fingerprint for a, i in plan.manifest.arms.items()}
"""
    assert manifest_writes(code) == []


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    return load_manifest(shutil.copytree(EXAMPLE, tmp_path / "run"))


def test_an_arm_is_scheduled_launched_preflighted_and_stopped(manifest: Manifest, tmp_path: Path) -> None:
    manifest.arms.clear()
    assert manifest.arm_scheduled("aa") is manifest.arm_scheduled("aa") and manifest.arms["aa"] == ArmInfo()
    with pytest.raises(ValidationError, match="ServerFacts has no field 'newer_key'"):  # a write: refused
        manifest.arm_launched("baseline", command=(), server={"newer_key": 1}, pid=None)
    server = {"kv_buffers_mib": {"total": 90.0}, "cpu_features": ["AVX2"]}
    manifest.arm_launched("baseline", command=("llama-server", "--api-key", "***"), server=server, pid=7)
    info = manifest.arms["baseline"]
    assert info.command == ["llama-server", "--api-key", "***"] and info.pid == 7 and info.started_utc
    assert isinstance(info.server, ServerFacts) and info.server.to_dict() == server
    manifest.arm_preflighted(
        "baseline", tokenizer_fingerprint="abc", checks=[{"check": "logprobs", "ok": True}]
    )
    manifest.suite_preflighted("baseline", "tool_calls", {"check": "parsed call", "ok": False, "detail": "x"})
    assert [(c.check, c.ok) for c in info.preflight] == [
        ("logprobs", True),
        ("tool_calls: parsed call", False),
    ]
    manifest.suite_flushed("baseline", "gsm8k", "flushed")
    manifest.suite_flushed("baseline", "arc_easy", "no /slots endpoint")
    assert info.server.cache_flush == {"gsm8k": "flushed", "arc_easy": "no /slots endpoint"}
    manifest.suite_timed("baseline", "gsm8k", 12.3456)
    manifest.arm_stopped("baseline")
    manifest.run_finished()
    assert info.durations_s == {"gsm8k": 12.35} and info.ended_utc and manifest.finished_utc
    write_manifest(tmp_path / "out", manifest)
    raw = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert list(raw["arms"]["baseline"]["server"]) == ["kv_buffers_mib", "cpu_features", "cache_flush"]
    assert load_manifest(tmp_path / "out") == manifest  # unset facts stay absent
    raw["arms"]["baseline"]["server"] = {"newer_key": 1, **raw["arms"]["baseline"]["server"]}
    # a later evalgate's key: a read keeps it, and writes it back after the known ones
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(raw))
    again = load_manifest(tmp_path / "out")
    assert again.arms["baseline"].server.model_extra == {"newer_key": 1}
    write_manifest(tmp_path / "again", again)
    written = json.loads((tmp_path / "again" / "manifest.json").read_text())["arms"]["baseline"]["server"]
    assert list(written) == ["kv_buffers_mib", "cpu_features", "cache_flush", "newer_key"]


def test_sequential_kernels_host_and_throughput(manifest: Manifest, tmp_path: Path) -> None:
    manifest.sequential_decided("gsm8k", {"decision": "pass"})  # a full run: nothing to record
    assert manifest.sequential is None
    manifest.sequential_started(25)
    manifest.sequential_decided("gsm8k", {"decision": "pass", "used": 50})
    assert manifest.sequential is not None and manifest.sequential.chunk == 25
    assert manifest.sequential.suites == {"gsm8k": {"decision": "pass", "used": 50}}
    manifest.kernels_checked({"skipped": "--skip-kernel-check"})
    manifest.host_settled({"wait_policy": {"reason": "idle"}})
    assert manifest.kernel_check == {"skipped": "--skip-kernel-check"} and manifest.host
    cap = {"kv_tokens": 16384, "kv_mib": 360.0, "source": "llama-server log"}
    sweep = {"levels": [{"concurrency": 1, "status": "ok", "output_tok_s": 10.0}], "capacity": cap}
    manifest.arm_swept("baseline", sweep)
    manifest.arm_swept("candidate", {"error": "the sweep failed"})
    doc = finish_compare(tmp_path, manifest)
    assert manifest.throughput == doc and all(a.throughput is None for a in manifest.arms.values())
    assert doc["arms"]["baseline"] == sweep and (tmp_path / "throughput.json").exists()


def test_a_resume_keeps_the_originals_state(manifest: Manifest) -> None:
    old = manifest.model_copy(deep=True)
    old.sequential_started(10)
    old.kernels_checked({"ok": True})
    old.host_settled({"threads": 2})
    fresh = manifest.model_copy(deep=True, update={"arms": {}, "created_utc": "2030-01-01T00:00:00Z"})
    fresh.host_settled({"threads": 16})
    fresh.resumed_from(old)
    assert fresh.arms == old.arms and fresh.created_utc == old.created_utc and fresh.request == old.request
    assert fresh.host == {"threads": 2} and fresh.kernel_check == {"ok": True} and fresh.sequential
    assert fresh.resumed_utc[:-1] == old.resumed_utc and fresh.resumed_utc[-1]


def test_a_new_manifest_is_stamped_with_this_process(manifest: Manifest, tmp_path: Path) -> None:
    """``Manifest.new`` is the one constructor of a run's manifest (compare and the lm-eval import):
    it reads the clock, argv, git and the package versions itself, and takes the rest as given."""
    from evalgate.store.manifest import command_line, git_state, package_versions

    given = {k: getattr(manifest, k) for k in ("engine", "engine_version", "variants", "launch", "suites")}
    new = Manifest.new(run_id="r1", request=manifest.request, **given, arm_names=["baseline"])
    assert (new.run_id, new.request, new.arm_names) == ("r1", manifest.request, ["baseline"])
    assert {k: getattr(new, k) for k in given} == given
    assert new.command == command_line() and new.packages == package_versions()
    assert new.git.model_dump() == git_state() and new.created_utc[:2] == "20"
    assert new.created_utc != manifest.created_utc and new.finished_utc is None
    write_manifest(tmp_path, new)
    assert load_manifest(tmp_path) == new


def test_the_run_plan_and_the_import_build_manifests_with_new() -> None:
    for module in ("run/plan.py", "lmeval/samples.py"):
        code = (PACKAGE / module).read_text()
        assert "Manifest.new(" in code and "Manifest(" not in code.replace("Manifest.new(", ""), module
