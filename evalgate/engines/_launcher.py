"""How every engine starts its server: the process handling they share, and the one helper
(``launch_server``) that turns a LaunchSpec into a command and runs it.

A launch is a context manager: it reserves a port, starts the server in its own process
group with its output in a log file, polls readiness while checking the process is alive,
and on any exit kills the whole group. Failures quote the exact command (secrets masked)
and the log tail, because that is what a person needs to fix them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from evalgate.engines._logs import read_from
from evalgate.engines.client import RetryPolicy
from evalgate.errors import ConfigError, ServerDied, ServerStartError
from evalgate.variants import LaunchSpec

__all__ = [
    "INPUT_FILE_FLAGS",
    "SIGNAL_CAUSES",
    "Diagnoses",
    "LaunchSlot",
    "ServerHandle",
    "WorkerSlot",
    "describe_exit",
    "exit_hint",
    "flags",
    "free_port",
    "launch_server",
    "log_tail",
    "mask",
    "new_api_key",
    "port_in_use",
    "require_input_files",
    "run_process",
    "server_address",
    "server_command",
]

MASK = "***"

# What a fatal signal usually means for an inference server; an engine may say more.
SIGNAL_CAUSES: dict[signal.Signals, str] = {
    signal.SIGILL: "the server binary uses CPU instructions this machine cannot execute: reinstall the "
    "engine built for this CPU (or a portable build)",
    signal.SIGKILL: "most likely out of memory (the kernel's OOM killer sends SIGKILL; `dmesg` says so): "
    "free memory, or lower the context and parallel slots",
    signal.SIGSEGV: "the server crashed (segmentation fault): the log tail shows its last step; try the "
    "same command by hand, and report it upstream if it repeats",
    signal.SIGBUS: "the server crashed (bus error), often a model file truncated or changed while "
    "mapped: delete it from the cache so it is derived or downloaded again",
    signal.SIGABRT: "the server aborted (a failed assertion or an uncaught exception): the log tail names it",
    signal.SIGFPE: "the server crashed (floating-point exception): the log tail shows its last step",
}
SignalDiagnosis = Callable[[signal.Signals, str], "str | None"]


class Diagnoses(Protocol):
    """What ``launch_server`` asks of an engine (every ``api.Engine`` answers both): named by its
    shape, because the engine contract imports this module."""

    def diagnose(self, log: str) -> str | None: ...

    def diagnose_signal(self, sig: signal.Signals, log: str) -> str | None: ...


def new_api_key() -> str:
    """A random key per launch: nothing else on the machine can use our servers by accident."""
    return "eg-" + secrets.token_urlsafe(24)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False


def mask(cmd: Sequence[str], secret_values: Sequence[str]) -> list[str]:
    """Copy of ``cmd`` with every secret value replaced; the caller's list is never touched."""
    secret_set = {s for s in secret_values if s}
    return [MASK if part in secret_set else part for part in cmd]


def log_tail(path: Path, lines: int = 30, secret_values: Sequence[str] = ()) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    for s in secret_values:
        if s:
            text = text.replace(s, MASK)
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class WorkerSlot:
    """Which of an arm's workers one launch is: engines/gateway starts ``count`` of them behind
    smg, all with the arm's one API key (smg forwards the client's key to the worker it picks)."""

    index: int
    count: int
    api_key: str

    def name(self, arm: str) -> str:
        """The worker's server name and log file stem: ``baseline-w0``."""
        return f"{arm}-w{self.index}"


@dataclass(frozen=True)
class LaunchSlot:
    """Where one ``Engine.launch`` runs and logs: the arm's name, the folder of its log, a fixed
    port (None: a free one) and, for an arm behind a gateway, which of its workers this is."""

    name: str
    log_dir: Path
    port: int | None = None
    worker: WorkerSlot | None = None

    @property
    def server(self) -> str:
        """The server's name and log file stem: the arm's, or its worker's (``baseline-w0``)."""
        return self.worker.name(self.name) if self.worker else self.name

    @property
    def api_key(self) -> str | None:
        """The arm's key its workers share; None: the launch makes one of its own."""
        return self.worker.api_key if self.worker else None


@dataclass
class ServerHandle:
    """A running server: where it listens, how to reach it, and how to tell whether it lives."""

    name: str
    base_url: str
    api_key: str
    command: list[str]
    """The launch command with the API key masked; safe to log and record."""
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    info: dict[str, object] = field(default_factory=dict)
    diagnose: Callable[[str], str | None] | None = None
    diagnose_signal: SignalDiagnosis | None = None
    retry: RetryPolicy | None = None
    """The run's request timeout and tries; the compare loop sets it before making the scorer."""
    log_start: int = 0  # where this launch begins in log_path (an arm launched again appends to it)

    def own_log(self) -> str:
        """This launch's lines: another launch's pool in the same file would be counted too."""
        return read_from(self.log_path, self.log_start)

    @property
    def launched(self) -> bool:
        """Whether evalgate started this server, so that its install is evalgate's to fix (an
        attached server's is its owner's: a fix never says to upgrade evalgate's engine for it)."""
        return self.process is not None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines, [self.api_key])

    def died(self, context: str = "") -> ServerDied:
        """The error to raise when this server has gone away, with its log tail."""
        code = self.process.poll() if self.process is not None else None
        how = describe_exit(code) if code is not None else "not answering"
        hint = exit_hint(code, self.tail(200), self.diagnose, self.diagnose_signal)
        return ServerDied(
            f"the {self.name} server died{' ' + context if context else ''} ({how})",
            fix=(f"{hint}; then " if hint else "")
            + "rerun with --resume RUN_DIR to continue; completed items are kept",
            detail=f"command: {shlex.join(self.command)}\nlog tail ({self.log_path}):\n{self.tail()}",
        )


def describe_exit(code: int) -> str:
    """``exit code 1`` or ``killed by signal SIGILL``: Popen reports a signal as ``-N``."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def exit_hint(
    code: int | None,
    log: str,
    diagnose: Callable[[str], str | None] | None = None,
    diagnose_signal: SignalDiagnosis | None = None,
) -> str | None:
    """The fix for a server that exited: a fatal signal says more than any log line before it."""
    if code is not None and code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            sig = None
        if sig is not None:
            specific = diagnose_signal(sig, log) if diagnose_signal else None
            if specific or sig in SIGNAL_CAUSES:
                return f"killed by {sig.name}: {specific or SIGNAL_CAUSES[sig]}"
    return diagnose(log) if diagnose else None


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it when evalgate dies, even by SIGKILL (no orphans)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: teardown still kills the group on every normal exit path


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # children of a dead leader
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


@contextlib.contextmanager
def run_process(
    cmd: Sequence[str],
    *,
    name: str,
    base_url: str,
    api_key: str,
    log_path: Path,
    ready: Callable[[], bool],
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    poll_s: float = 0.2,
    diagnose: Callable[[str], str | None] | None = None,
    diagnose_signal: SignalDiagnosis | None = None,
) -> Iterator[ServerHandle]:
    """Start ``cmd`` in its own process group and yield once ``ready()`` holds; always clean up."""
    cmd = list(cmd)
    shown = mask(cmd, [api_key])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    with open(log_path, "ab") as log:
        start = log.tell()
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=full_env,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise ServerStartError(
                f"could not start the {name} server: {exc}",
                fix="check that the engine is installed (pip install 'evalgate[cpu]' for llama.cpp)",
                detail=f"command: {shlex.join(shown)}",
            ) from exc
    handle = ServerHandle(name, base_url, api_key, shown, log_path, proc, diagnose=diagnose,
                          diagnose_signal=diagnose_signal, log_start=start)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                hint = exit_hint(proc.returncode, handle.tail(200), diagnose, diagnose_signal)
                raise ServerStartError(
                    f"the {name} server exited during startup ({describe_exit(proc.returncode)})",
                    fix=hint or "read the log tail below; the exact command is quoted so you can rerun it",
                    detail=f"command: {shlex.join(shown)}\nlog tail ({log_path}):\n{handle.tail()}",
                )
            if ready():
                break
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"the {name} server was not ready within {timeout_s:.0f} s",
                    fix="raise the readiness timeout, or read the log tail for what it is waiting on",
                    detail=f"command: {shlex.join(shown)}\nlog tail ({log_path}):\n{handle.tail()}",
                )
            time.sleep(poll_s)
        yield handle
    finally:
        _kill_group(proc)


def server_address(port: int | None, name: str, api_key: str | None = None) -> tuple[int, str, str]:
    """(port, API key, base URL) for the ``name`` server about to launch, with a fresh key unless
    ``api_key`` is given (the workers of one arm behind a gateway share the arm's key).

    A port the user named is checked first: a server that cannot bind it would otherwise fail
    minutes into a GPU start, or answer a stranger's requests on a port someone else holds."""
    if port is not None and port_in_use(port):
        raise ServerStartError(
            f"port {port} on 127.0.0.1 is already in use, so the {name} server cannot listen there",
            fix="omit --port to let evalgate pick a free port, or stop whatever holds it",
        )
    port = port or free_port()
    return port, api_key or new_api_key(), f"http://127.0.0.1:{port}"


def flags(args: Sequence[tuple[str, str | None]]) -> list[str]:
    """A LaunchSpec's args as command-line flags: a None value is a bare flag."""
    out: list[str] = []
    for key, value in args:
        out += [key] if value is None else [key, value]
    return out


# Launch flags whose value is a file the server reads at startup (llama-server's common/arg.cpp;
# vLLM's and SGLang's uvicorn TLS files). llama-server reports a missing one as "error while
# handling argument", which reads like a flag it does not know; checked before any server starts.
INPUT_FILE_FLAGS = frozenset(
    "--chat-template-file --grammar-file --json-schema-file --api-key-file --ssl-key-file "
    "--ssl-cert-file --ssl-keyfile --ssl-certfile --lora --control-vector --mmproj".split()
)


def require_input_files(specs: Mapping[str, LaunchSpec]) -> None:
    """Refuse (exit 2) a launch flag that names a file that is not there, naming the arm, the flag
    and the path, before any server starts (relative paths are from where evalgate runs)."""
    for arm, spec in specs.items():
        for key, value in spec.args:
            if key in INPUT_FILE_FLAGS and value and not Path(value).expanduser().is_file():
                where = Path(value).expanduser()
                raise ConfigError(
                    f"the {arm}'s {key} names {value}, which is not a file"
                    + ("" if where.is_absolute() else f" (looked for {where.absolute()})"),
                    fix=f"correct the path of {key} in evalgate.toml [variants] args, or create the file",
                )


def server_command(
    head: Sequence[str], spec: LaunchSpec, *, port: int, api_key: str, extra: Sequence[str] = ()
) -> list[str]:
    """``head`` (the program and its model argument), then where to listen and the key, then
    ``extra``, then the spec's flags: the one layout every launched engine uses. A fresh list."""
    listen = ["--host", "127.0.0.1", "--port", str(port), "--api-key", api_key]
    return [*head, *listen, *extra, *flags(spec.args)]


@contextlib.contextmanager
def launch_server(
    engine: Diagnoses,
    command: Callable[[int, str], list[str]],
    slot: LaunchSlot,
    *,
    ready: Callable[[str, str], bool],
    env: Mapping[str, str],
    timeout_s: float,
) -> Iterator[ServerHandle]:
    """Start ``command(port, api_key)`` as the ``slot.server`` server (log in
    ``slot.log_dir/<server>.log``), ready when ``ready(base_url, api_key)`` holds; failures are
    explained by ``engine``'s diagnosis."""
    name = slot.server
    port, api_key, base_url = server_address(slot.port, name, slot.api_key)
    with run_process(
        command(port, api_key),
        name=name,
        base_url=base_url,
        api_key=api_key,
        log_path=slot.log_dir / f"{name}.log",
        ready=lambda: ready(base_url, api_key),
        env=env,
        timeout_s=timeout_s,
        diagnose=engine.diagnose,
        diagnose_signal=engine.diagnose_signal,
    ) as handle:
        yield handle
