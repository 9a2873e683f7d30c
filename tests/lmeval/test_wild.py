"""lm-eval logs as they are found in the wild (#31 items 1, 2, 6; the lm-eval cases of #32).

tests/fixtures/lmeval/wild/ (each folder's README says how it was made):

- ``json_output/``: two real lm-eval 0.4.13 runs (F16 and Q4_0) written with
  ``--output_path json_output/bf16.json`` and ``.../int4.json``: one folder, ``<name>_<date>.json``
  results and both runs' samples side by side.
- ``v0.4.2/``: the lm-eval 0.4.0-0.4.2 layout (``<model_args>_<task>.jsonl`` holding one JSON array,
  ``results.json``), and ``main-2024-05/``: lm-eval main of May 2024
  (``samples_<task>_<date>.json``, one JSON array), both reshaped by hand from the 0.4.13 fixture's
  first 5 documents.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main

LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"
BASE, CAND = LMEVAL / "bf16", LMEVAL / "int4"
WILD = LMEVAL / "wild"
SHARED = WILD / "json_output"
OLD = WILD / "v0.4.2"
MAY = WILD / "main-2024-05"


def _compare(tmp_path: Path, base: Path, cand: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    argv = ["compare", "--baseline-samples", str(base), "--candidate-samples", str(cand), "--out", str(out)]
    return main([*argv, *extra]), out


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def _items(out: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(suite, arm, item) -> metrics and extracted answers, from the records."""
    got = {}
    for f in (out / "items").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            got[r["suite"], r["arm"], r["item_id"]] = {"metrics": r["metrics"], "extracted": r["extracted"]}
    return got


def _results(arm: str) -> Path:
    (path,) = SHARED.glob(f"{arm}_*.json")
    return path


def _date(arm: str) -> str:
    return _results(arm).stem.split("_", 1)[1]


# -- #31 item 1: results found by content; an explicit results file ------------------------------


def test_an_output_path_json_run_imports_with_its_model_and_config(tmp_path: Path) -> None:
    code, out = _compare(
        tmp_path, SHARED, SHARED, "--baseline-run", _date("bf16"), "--candidate-run", _results("int4").name
    )
    assert code in (0, 1)
    info = _manifest(out)["imported"]
    for arm in ("bf16", "int4"):
        got = info["baseline" if arm == "bf16" else "candidate"]
        assert got["results_file"] == str(_results(arm))
        assert got["model"] == "evalgate" and "base_url=" in got["model_args"]
        assert got["lm_eval_version"] == "0.4.13" and got["n_shot"] == {"arc_easy": 0}
        assert got["run"] == _date(arm) and got["tasks"] == ["arc_easy"]
        assert any("found by its content" in n for n in got["notes"])
        assert any("picked by --" in n for n in got["notes"])


def test_a_results_file_given_as_the_path_is_used(tmp_path: Path) -> None:
    code, out = _compare(tmp_path, _results("bf16"), _results("int4"))
    assert code in (0, 1)
    info = _manifest(out)["imported"]
    assert info["baseline"]["results_file"] == str(_results("bf16"))
    assert info["candidate"]["results_file"] == str(_results("int4"))
    assert info["candidate"]["lm_eval_version"] == "0.4.13"


# -- #31 item 2: several runs in one folder; one run on both arms --------------------------------


def test_a_folder_of_two_runs_is_refused_listing_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _compare(tmp_path, _results("bf16"), SHARED)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "holds 2 lm-eval runs" in err and "--candidate-run" in err
    for arm in ("bf16", "int4"):
        assert _date(arm) in err and "arc_easy" in err
    assert not (out / "manifest.json").exists()


def test_an_unknown_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _compare(tmp_path, _results("bf16"), SHARED, "--candidate-run", "2020-01-01T00-00-00")
    assert code == 2 and "no such run" in capsys.readouterr().err


def test_one_run_on_both_arms_is_refused_unless_same_server_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(tmp_path, BASE, BASE)[0] == 2
    assert "both arms are the same samples files" in capsys.readouterr().err
    copy = tmp_path / "copy"
    shutil.copytree(BASE, copy)
    assert _compare(tmp_path, BASE, copy)[0] == 2
    assert "byte-identical" in capsys.readouterr().err
    code, out = _compare(tmp_path, BASE, copy, "--same-server-ok")
    assert code == 0
    notes = _manifest(out)["imported"]["candidate"]["notes"]
    assert any("A/A" in n and "--same-server-ok" in n for n in notes)


# -- #31 item 6: older layouts --------------------------------------------------------------------


def _rewritten(
    prefix: Path, pattern: str, rewrite: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> list[Path]:
    """Both arms' fixture folders copied to ``<prefix>-<arm>``, the rows of each samples file
    matching ``pattern`` passed through ``rewrite``."""
    out = []
    for arm in ("bf16", "int4"):
        dst = prefix.parent / f"{prefix.name}-{arm}"
        shutil.copytree(LMEVAL / arm, dst)
        for f in dst.rglob(pattern):
            rows = [json.loads(line) for line in f.read_text().splitlines()]
            f.write_text("".join(json.dumps(r) + "\n" for r in rewrite(rows)))
        out.append(dst)
    return out


def test_lmeval_0_4_2_and_may_2024_layouts_import_as_the_0_4_13_files_do(tmp_path: Path) -> None:
    """The same 5 documents in three layouts give the same records."""
    modern = _rewritten(
        tmp_path / "modern", "samples_*.jsonl", lambda rows: [r for r in rows if r["doc_id"] < 5]
    )
    runs = {}
    for name, (b, c) in {
        "modern": modern,
        "v0.4.2": (OLD / "bf16", OLD / "int4"),
        "may": (MAY / "bf16", MAY / "int4"),
    }.items():
        code, out = _compare(tmp_path / name, b, c)
        assert code in (0, 1), name
        runs[name] = out
    want = _items(runs["modern"])
    assert len(want) == 2 * 2 * 5
    assert _items(runs["v0.4.2"]) == want and _items(runs["may"]) == want
    gsm = next(v for k, v in want.items() if k[0] == "gsm8k")
    assert set(gsm["extracted"]) == {"strict-match", "flexible-extract"}
    old = _manifest(runs["v0.4.2"])["imported"]["baseline"]
    assert old["layout"].startswith("lm-eval 0.4.0-0.4.2") and old["model"] == "hf"
    assert "pretrained=HuggingFaceTB/SmolLM2-135M-Instruct" in old["model_args"]
    assert any("taken as strict-match, flexible-extract" in n for n in old["notes"])
    assert any("no doc_hash" in n for n in old["notes"])
    may = _manifest(runs["may"])["imported"]["candidate"]
    assert (
        may["layout"].startswith("lm-eval main of May-June 2024")
        and may["run"] == "2024-05-20T11-12-13.456789"
    )


def test_june_2024_json_lines_in_a_json_file_and_0_4_6_rows_import(tmp_path: Path) -> None:
    """samples_<task>_<date>.json holding JSON lines (2024-05-31 to 06-13), and lm-eval 0.4.3-0.4.6
    rows (no filter, no metrics list) in today's file names."""
    june = []
    for arm in ("bf16", "int4"):
        dst = tmp_path / f"june-{arm}"
        shutil.copytree(MAY / arm, dst)
        for f in dst.rglob("samples_*.json"):
            f.write_text("".join(json.dumps(r) + "\n" for r in json.loads(f.read_text())))
        june.append(dst)
    code, out = _compare(tmp_path / "june", *june)
    assert code in (0, 1) and len(_items(out)) == 20

    def as_046(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        order = ["strict-match", "flexible-extract"]
        rows.sort(key=lambda r: (order.index(r["filter"]), r["doc_id"]))
        for r in rows:
            del r["filter"], r["metrics"]
        return rows

    rows_046 = _rewritten(tmp_path / "046", "samples_gsm8k_*.jsonl", as_046)
    code_046, out_046 = _compare(tmp_path / "046", *rows_046)
    code_new, out_new = _compare(tmp_path / "new", BASE, CAND)
    assert code_046 == code_new and _items(out_046) == _items(out_new)


def test_an_old_layout_pairs_with_a_newer_run_of_the_same_documents(tmp_path: Path) -> None:
    """0.4.0-0.4.2 logged no doc_hash/prompt_hash: computed as lm-eval >= 0.4.3 does, they match."""
    code, out = _compare(tmp_path, OLD / "bf16", MAY / "int4", "--suites", "arc_easy")
    assert code in (0, 1)
    assert _manifest(out)["suites"]["arc_easy"]["n"] == 5


def test_an_old_layout_without_its_results_json_is_refused_naming_the_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "old"
    shutil.copytree(OLD / "bf16", dst)
    (dst / "results.json").unlink()
    code, _ = _compare(tmp_path, dst, OLD / "int4")
    err = capsys.readouterr().err
    assert code == 2 and "0.4.0-0.4.2" in err and "results.json" in err
    (f,) = dst.glob("*_arc_easy.jsonl")
    code, _ = _compare(tmp_path, f, OLD / "int4")
    assert code == 2 and "0.4.0-0.4.2" in capsys.readouterr().err


# -- #32: hostile samples, each exit 2 naming the file, row and rule ------------------------------


def _edit(
    tmp_path: Path, change: Callable[[list[dict[str, Any]]], list[Any]], task: str = "arc_easy"
) -> Path:
    dst = tmp_path / "cand"
    shutil.copytree(CAND, dst)
    (path,) = dst.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in change(rows)))
    return dst


def _at(which: int, /, **values: Any) -> Callable[[list[dict[str, Any]]], list[Any]]:
    """Set (or, with ..., delete) fields of the row of doc_id ``which``."""

    def change(rows: list[dict[str, Any]]) -> list[Any]:
        for r in rows:
            if r["doc_id"] == which:
                for k, v in values.items():
                    if v is ...:
                        del r[k]
                    else:
                        r[k] = v
        return rows

    return change


def _appended(rows: list[dict[str, Any]]) -> list[Any]:
    (path,) = BASE.rglob("samples_arc_easy_*.jsonl")
    return [*rows, *(json.loads(line) for line in path.read_text().splitlines())]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda rows: [*rows, rows[3]], "line 31: doc_id 3 (filter none) was logged before, at line 4"),
        (_appended, "line 31: doc_id 0 (filter none) was logged before, at line 1"),
        (_at(3, doc_id=3.0), "line 4: doc_id 3.0 is not a non-negative integer"),
        (_at(3, doc_id=None), "line 4: doc_id None is not a non-negative integer"),
        (_at(3, doc_id="3"), "line 4: doc_id '3' is not a non-negative integer"),
        (_at(3, doc_id=True), "line 4: doc_id True is not a non-negative integer"),
        (_at(3, doc=...), "line 4: doc_id 3 has no doc"),
        (_at(3, metrics="acc"), "line 4: metrics 'acc' is not a list of names"),
        (lambda rows: [*rows, [1, 2]], "line 31 is not a JSON object"),
        (_at(3, acc=7), "arc_easy doc_id 3: acc = 7, but acc is 0 or 1 per document"),
        (_at(4, acc_norm=-1.0), "arc_easy doc_id 4: acc_norm = -1.0, but acc_norm is 0 or 1"),
    ],
    ids=["dup-id", "appended", "float-id", "null-id", "str-id", "bool-id", "no-doc", "metrics-str",
         "not-object", "acc-7", "acc-norm-neg"],
)  # fmt: skip
def test_a_bad_row_is_refused_naming_file_row_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[list[Any]], list[Any]], says: str
) -> None:
    cand = _edit(tmp_path, change)
    code, out = _compare(tmp_path, BASE, cand)
    err = capsys.readouterr().err
    assert code == 2, err
    assert says in err and "samples_arc_easy_" in err and "Traceback" not in err
    assert not (out / "manifest.json").exists()


def _folder_case(tmp_path: Path, case: str) -> Path:
    dst = tmp_path / "cand"
    shutil.copytree(CAND, dst)
    (run,) = dst.iterdir()
    if case == "empty-unknown-task":
        (run / "samples_my_task_2026-12-01T12-07-49.670053.jsonl").write_text("")
    elif case == "results-list":
        (res,) = run.glob("results_*.json")
        res.write_text("[1, 2]")
    elif case == "dir-loop":
        os.symlink("..", run / "up")
    elif case == "file-loop":
        name = run / "samples_x_2026-12-01T12-07-49.670053.jsonl"
        os.symlink(name.name, name)
    elif case == "fifo":
        (res,) = run.glob("samples_arc_easy_*.jsonl")
        res.unlink()
        os.mkfifo(res)
    return dst


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("empty-unknown-task", "samples_my_task_2026-12-01T12-07-49.670053.jsonl holds no samples"),
        ("results-list", "is not an lm-eval results file: it is a list"),
        ("dir-loop", "is a symlink loop"),
        ("file-loop", "samples_x_2026-12-01T12-07-49.670053.jsonl is a symlink loop"),
        ("fifo", "is not a regular file"),
    ],
)
def test_a_bad_file_in_a_samples_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, says: str
) -> None:
    cand = _folder_case(tmp_path, case)
    code, _ = _compare(tmp_path, BASE, cand)
    err = capsys.readouterr().err
    assert code == 2, err
    assert says in err and "Traceback" not in err


def test_a_graded_unknown_metric_stays_continuous(tmp_path: Path) -> None:
    """Only the known binary metrics are held to {0, 1}; a task's own metric may be graded."""

    def graded(rows: list[dict[str, Any]]) -> list[Any]:
        for r in rows:
            r["metrics"], r["my_score"] = ["my_score"], (r["doc_id"] % 4) / 4
        return rows

    arms = []
    for name in ("b", "c"):
        dst = tmp_path / name
        shutil.copytree(CAND if name == "c" else BASE, dst)
        for p in dst.rglob("samples_gsm8k_*.jsonl"):
            p.unlink()
        (path,) = dst.rglob("samples_arc_easy_*.jsonl")
        rows = graded([json.loads(line) for line in path.read_text().splitlines()])
        path.with_name(path.name.replace("arc_easy", "my_task")).write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
        path.unlink()
        arms.append(dst)
    code, out = _compare(tmp_path, *arms)
    assert code in (0, 1)
    assert _manifest(out)["suites"]["my_task"]["metric_kind"] == "continuous"
