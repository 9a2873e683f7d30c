"""How a run folder's files are opened: regular files only, never through a link, bounded.

A run folder is shared ground: a CI workspace, a copied artifact, a folder another user can
write. Every entry evalgate opens there is one it wrote, a regular file, so anything else was
put there by someone else and is refused (exit 2, naming it) instead of being used:

- a **symbolic link** is never followed (``O_NOFOLLOW``): the lock would write a pid, a temporary
  file a report, a torn-tail repair a truncation, into whatever file the link points to;
- a **FIFO, socket or device** is refused before a byte is read: opening a FIFO blocks forever
  (``evalgate report`` hung), ``/dev/zero`` never ends. Opens use ``O_NONBLOCK`` so that even the
  open cannot block, and ``fstat`` on the open descriptor decides (no check-then-open race);
- a **directory** where a file belongs is named, not a traceback.

Every read is bounded by a named cap (``MAX_DOCUMENT_BYTES`` for manifest.json and the like,
``MAX_RECORDS_BYTES`` and ``MAX_LINE_BYTES`` for an items file), so a sparse or runaway file is
refused with the cap rather than exhausting memory.

Temporary files (``write_atomic``) are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a stale
one left by a killed run is a regular file and is removed first; anything else there is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from evalgate.errors import ConfigError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "MAX_RECORDS_BYTES",
    "append_bytes",
    "entry_exists",
    "file_kind",
    "iter_lines",
    "make_folder",
    "open_lock",
    "read_document",
    "truncate_torn_tail",
    "write_atomic",
]

MAX_DOCUMENT_BYTES = 256 << 20
"""manifest.json, verdict.json, throughput.json, prompts/*.jsonl: a run's largest is a few MB."""
MAX_RECORDS_BYTES = 16 << 30
"""One items/<suite>.<arm>.jsonl: a drift suite's top-k distributions make the largest ones."""
MAX_LINE_BYTES = 256 << 20
"""One record (one line of an items file)."""

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_FIX = (
    "evalgate keeps only regular files in a run folder and never follows a link there: remove or "
    "move that entry (a temporary or lock file is recreated), then run the command again"
)


def file_kind(mode: int) -> str:
    """What a ``stat`` mode is, in words that finish "PATH is ...": "a regular file", "a directory",
    "a FIFO (named pipe)"; every message that refuses an entry names it the same way."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def _refuse(path: Path, mode: int, expected: str = "a regular file") -> ConfigError:
    return ConfigError(f"{path} is {file_kind(mode)}, not {expected}", fix=_FIX)


def _open(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` without following a link or blocking; a descriptor of a regular file, or a
    ConfigError naming the path and what is there instead."""
    try:
        fd = os.open(path, flags | _NOFOLLOW, mode)
    except OSError as exc:
        try:
            found = os.lstat(path).st_mode
        except OSError:
            found = None
        if found is not None and not stat.S_ISREG(found):
            raise _refuse(path, found) from None  # ELOOP, EISDIR, ENXIO (a FIFO without a reader), ...
        if exc.errno == errno.ENOTDIR:
            raise ConfigError(f"{path}: a folder on its path is a file", fix=_FIX) from None
        raise ConfigError(
            f"cannot open {path}: {exc.strerror or exc}", fix="check the path and its permissions"
        ) from None
    found = os.fstat(fd).st_mode
    if not stat.S_ISREG(found):
        os.close(fd)
        raise _refuse(path, found)
    os.set_blocking(fd, True)  # O_NONBLOCK was for the open; a regular file's reads never block
    return fd


def entry_exists(path: Path) -> bool:
    """Whether anything is at ``path`` (a dangling link too); a file where a folder on its path
    belongs is refused."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise ConfigError(f"{path}: a folder on its path is a file", fix=_FIX) from None
    return True


def make_folder(path: Path) -> None:
    """``mkdir -p``, with a file (or anything else) where the folder belongs named."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise _refuse(path, os.lstat(path).st_mode, "a folder") from None
    except NotADirectoryError:
        raise ConfigError(f"{path}: a folder on its path is a file", fix=_FIX) from None


def read_document(path: Path, cap: int | None = None) -> bytes:
    """A whole run-folder document, refused when larger than ``cap`` (``MAX_DOCUMENT_BYTES``)."""
    cap = MAX_DOCUMENT_BYTES if cap is None else cap
    fd = _open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size > cap:
            raise _too_big(path, cap)
        data = f.read(cap + 1)
    if len(data) > cap:  # it grew while being read
        raise _too_big(path, cap)
    return data


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _too_big(path: Path, cap: int) -> ConfigError:
    return ConfigError(
        f"{path} is larger than {_size(cap)}, the most evalgate reads of such a file",
        fix="this is not a file evalgate wrote: restore it, or start a new run",
    )


def iter_lines(path: Path) -> Iterator[bytes]:
    """The lines of an items file, each with its newline (a torn last line without one); the file
    is refused beyond ``MAX_RECORDS_BYTES`` and a line beyond ``MAX_LINE_BYTES``."""
    cap, line_cap = MAX_RECORDS_BYTES, MAX_LINE_BYTES
    fd = _open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size > cap:
            raise _too_big(path, cap)
        lineno = 0
        while raw := f.readline(line_cap + 1):
            lineno += 1
            if len(raw) > line_cap:
                raise _too_long(path, lineno, line_cap)
            yield raw


def _too_long(path: Path, lineno: int | str, cap: int) -> ConfigError:
    return ConfigError(
        f"{path}:{lineno} is longer than {_size(cap)}, the most a record may be",
        fix="this is not a record evalgate wrote: remove that line (its item reruns with --resume)",
    )


def truncate_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline (a write cut short by a kill), so appends stay valid
    JSONL; reads only the tail (at most one record's worth), not the file."""
    fd = _open(path, os.O_RDWR)
    try:
        size = end = os.fstat(fd).st_size
        if size > MAX_RECORDS_BYTES:
            raise _too_big(path, MAX_RECORDS_BYTES)
        while end > 0:
            start = max(0, end - (1 << 16))
            chunk = os.pread(fd, end - start, start)
            if end == size and chunk.endswith(b"\n"):
                return  # the common case: nothing torn
            cut = chunk.rfind(b"\n")
            torn = start + cut + 1 if cut >= 0 else start  # where the torn line starts, so far
            if size - torn > MAX_LINE_BYTES:
                raise _too_long(path, "last line", MAX_LINE_BYTES)
            if cut >= 0:
                os.ftruncate(fd, torn)
                return
            end = start
        if size:
            os.ftruncate(fd, 0)  # one torn line and nothing else
    finally:
        os.close(fd)


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` and flush it to disk (one record per call: a kill loses at most that one)."""
    fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def open_lock(path: Path) -> int:
    """The run lock's descriptor, read-write, created if absent; never through a link."""
    return _open(path, os.O_RDWR | os.O_CREAT)


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``path`` through ``path.tmp`` and a rename, so a crash never leaves half a file that
    looks complete. The temporary file is created exclusively and never through a link.

    Text is UTF-8; a lone UTF-16 surrogate (which no UTF-8 file can hold, and which a server's
    text can carry into a report) is written as its ``\\udXXX`` escape: inside a JSON string
    that is the same character again, elsewhere it shows as what it is.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    tmp = path.with_name(path.name + ".tmp")
    try:
        found = os.lstat(tmp).st_mode
    except FileNotFoundError:
        found = None
    except NotADirectoryError:
        raise ConfigError(f"{tmp}: a folder on its path is a file", fix=_FIX) from None
    if found is not None:
        if not stat.S_ISREG(found):
            raise _refuse(tmp, found)
        tmp.unlink()  # left by a killed run
    fd = _open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and os.path.isdir(path) and not os.path.islink(path):
            raise _refuse(path, os.lstat(path).st_mode) from None
        raise
