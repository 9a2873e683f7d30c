"""Reading a file the user named (a config, a private exam, a plan's input): refused with what the
path is when it is not a regular file, and read as UTF-8 with the line of the first bad byte."""

from __future__ import annotations

from pathlib import Path

from evalgate.errors import ConfigError
from evalgate.store.files import file_kind

__all__ = ["path_kind", "read_text", "require_regular_file"]


def path_kind(path: Path) -> str:
    """What ``path`` is, in words that finish "PATH ...": "does not exist", "is a directory",
    "is a FIFO (named pipe)", ... A message about a path that is there but is not a regular file
    says what it is, never that it does not exist."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a symbolic link to a path that does not exist" if path.is_symlink() else "does not exist"
    except OSError as exc:  # a symlink loop (ELOOP), a folder that may not be listed
        return f"cannot be reached ({exc.strerror or exc})"
    return "is " + file_kind(mode)


def require_regular_file(path: Path, what: str, *, fix: str) -> None:
    """Refuse (exit 2) a ``path`` that is not a regular file, saying what it is: reading a FIFO
    blocks forever and a device never ends, so neither is read."""
    kind = path_kind(path)
    if kind != "is a regular file":
        said = kind if kind.startswith(("does not", "cannot")) else f"is not a file: it {kind}"
        raise ConfigError(f"{what} {path} {said}", fix=fix)


def read_text(path: Path) -> str:
    """A text file as UTF-8; a file that is not UTF-8 (or cannot be read, or is not a regular
    file) is a ConfigError naming the file and the line of the first bad byte."""
    require_regular_file(path, "the file", fix="give a regular text file (not a folder, pipe or device)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror or exc}", fix="check the path and its permissions"
        ) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})",
            fix="save the file as UTF-8",
        ) from exc
