"""Command-line flags built from a pydantic model's fields, so each option is declared once.

A field's name gives the flag (``max_gen_tokens`` -> ``--max-gen-tokens``), its type the parsing
(a bool is a switch, a ``Literal`` a choice, a tuple a list), its description the help and its
default the help's "(default: ...)". ``evalgate.request.Flag`` in the field's metadata adds a
metavar, a list form or a parser. Every flag defaults to None in argparse, so a caller can tell
what the user typed from what they left out (``--resume`` needs that).
"""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from evalgate.request import Flag

__all__ = ["add_model_flags", "flag_name", "typed_values"]


def _flag(info: FieldInfo) -> Flag:
    return next((m for m in info.metadata if isinstance(m, Flag)), Flag())


def flag_name(name: str, info: FieldInfo) -> str:
    return "--" + (_flag(info).name or name.replace("_", "-"))


def _base(annotation: Any) -> Any:
    """``int | None`` -> int; other types unchanged."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _default_note(info: FieldInfo, flag: Flag, kind: Any) -> str:
    if flag.default_text is not None:
        return f" (default: {flag.default_text})"
    default = info.get_default(call_default_factory=True)
    if kind is bool:
        return " (default: on)" if default else ""
    if default in (None, (), {}):
        return ""
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    return f" (default: {shown})"


def add_model_flags(
    parser: argparse.ArgumentParser, model: type[BaseModel], *, skip: tuple[str, ...] = ()
) -> None:
    """One flag per field of ``model`` (except ``skip``)."""
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        flag = _flag(info)
        kind = _base(info.annotation)
        text = (info.description or "") + _default_note(info, flag, kind)
        kw: dict[str, Any] = {"dest": name, "default": None, "help": text.replace("%", "%%")}
        if flag.metavar:
            kw["metavar"] = flag.metavar
        if kind is bool:
            default = info.get_default()
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
        elif flag.listed == "append":
            kw["action"] = "append"
        elif get_origin(kind) is Literal:
            kw["choices"] = list(get_args(kind))
            if flag.bare is not None:  # --aa alone is --aa baseline
                kw["nargs"], kw["const"] = "?", flag.bare
        elif kind in (int, float, Path):
            kw["type"] = kind
        parser.add_argument(flag_name(name, info), **kw)


def typed_values(
    args: argparse.Namespace, model: type[BaseModel], *, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The fields the user typed, as the model takes them (a flag left out is absent)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        raw = getattr(args, name, None)
        if name in skip or raw is None:
            continue
        flag = _flag(info)
        if flag.parse is not None:
            out[name] = flag.parse(raw)
        elif flag.listed == ",":
            out[name] = tuple(s.strip() for s in str(raw).split(",") if s.strip())
        elif flag.listed == "append":
            out[name] = tuple(raw)
        else:
            out[name] = raw
    return out
