"""One writer per run folder: an advisory ``fcntl`` lock on ``RUN/.lock``.

Two ``evalgate compare`` processes on one run (say two ``--resume`` of it) would each send every
remaining item and append the same records twice. The second one fails at once instead, naming
the process that holds the run. The lock goes with its process, so a killed run leaves nothing to
clean up; the file itself stays (removing it would race a process opening it).

The lock file is opened without following a link and must be a regular file
(``evalgate.store.files.open_lock``): a link planted at ``RUN/.lock`` would otherwise get the
pid written into it (the file it points to truncated), and a FIFO or device there is no lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from evalgate.errors import ConfigError
from evalgate.store.files import make_folder, open_lock

__all__ = ["LOCK_FILE", "RunLock"]

LOCK_FILE = ".lock"


class RunLock:
    """Held from ``acquire`` until ``release`` (or the process ends); not re-entrant."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        if self._fd is not None:
            return self
        make_folder(self.path.parent)
        fd = open_lock(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode("ascii", errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(
                f"run {self.path.parent} in use by pid {holder}",
                fix="wait for that run to finish (or stop it), then continue with --resume",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
