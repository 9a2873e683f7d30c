"""Bad user input is one kind of error everywhere: ``invalid_input`` turns pydantic's first
complaint into an exit-2 ConfigError naming the file, flag or option and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from evalgate.config import load_config
from evalgate.errors import ConfigError, Invalid, first_invalid, invalid_input
from evalgate.suites import configure, default_registry


class _Inner(BaseModel):
    n: int


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: _Inner


def _refused(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as err:
        _Doc.model_validate(data)
    return err.value


def test_the_first_complaint_names_its_dotted_place() -> None:
    exc = _refused({"inner": {"n": "x"}, "other": 1})
    assert first_invalid(exc) == Invalid("inner.n", exc.errors()[0]["msg"], "int_parsing")
    err = invalid_input(exc, at=lambda where: f"doc.toml: {where}", fix="fix it")
    assert isinstance(err, ConfigError) and err.exit_code == 2
    assert err.cause == f"doc.toml: inner.n: {exc.errors()[0]['msg']}" and err.fix == "fix it"


def test_a_complaint_about_the_whole_document_says_top_level() -> None:
    exc = _refused(["not", "a", "table"])
    assert first_invalid(exc).where == "(top level)"
    assert invalid_input(exc, at=str, fix="").cause.startswith("(top level): ")


def test_the_readers_of_user_input_speak_through_it(tmp_path: Path) -> None:
    toml = tmp_path / "evalgate.toml"
    toml.write_text('[client]\ntries = "many"\n')
    with pytest.raises(ConfigError) as err:
        load_config(toml)
    assert err.value.cause.startswith(f"{toml}: client.tries: ")
    suite = default_registry().get("tool_calls")
    with pytest.raises(ConfigError) as err:
        configure(suite, {"prefill": "maybe"})
    assert err.value.cause.startswith("suite option tool_calls.prefill: ")
    assert (
        "--suite-opt tool_calls.KEY=VALUE" in err.value.fix and "tool_calls takes: prefill=" in err.value.fix
    )
