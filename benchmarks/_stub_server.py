"""An instant, deterministic OpenAI-compatible stub server for harness-overhead benchmarks.

It answers the way llama-server and vLLM answer, with no model behind it, so that a harness's own
cost (HTTP client, tokenization round trips, parsing, scoring) is all that a benchmark measures:

* ``/tokenize`` (llama.cpp ``content`` or vLLM ``prompt``), ``/detokenize`` and ``/tokenizer_info``;
* ``/v1/completions`` with ``echo`` and ``logprobs`` (the OpenAI legacy format lm-eval reads),
  with a token-id grammar ``root ::= <[12]> <[34]>`` (llama.cpp ``logprobs.content``, what
  evalgate reads), or plain generation with stop strings.

Tokens are GPT-2-like word pieces, so token counts (and response sizes) are realistic. The
log-probability of a token depends only on it and the token before it, so every harness gets the
same numbers for the same text. Run as a script it serves in its own process (its own GIL), prints
its URL, and stops by itself after ``--lifetime`` seconds or when its parent closes stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from typing import Any

__all__ = ["StubModel", "serve_in_subprocess", "serve_in_thread"]

_PIECE = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+|.", re.S)
_FORCED = re.compile(r"<\[(\d+)\]>")
ALT, EOS = 0, 1  # reserved ids: the "other" top-1 token, and end of sequence


class StubModel:
    """Tokenizer plus a fixed bigram 'model': logprob(prev, tok) in [-10.05, -0.05]."""

    def __init__(self) -> None:
        self.pieces: list[str] = ["<alt>", "</s>"]
        self.ids: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        """Requests served per path, for ``GET /stub/stats``: how many round trips a harness makes."""

    def tokenize(self, text: str) -> list[int]:
        out = []
        for piece in _PIECE.findall(text):
            tid = self.ids.get(piece)
            if tid is None:
                tid = self.ids[piece] = len(self.pieces)
                self.pieces.append(piece)
            out.append(tid)
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return "".join(self.pieces[t] for t in tokens)

    @staticmethod
    def logprob(prev: int, tok: int) -> float:
        return -0.05 - ((prev * 2654435761 + tok * 40503) & 0xFFFF) / 6553.6

    @staticmethod
    def greedy(prev: int, tok: int) -> bool:
        return (prev * 31 + tok) % 3 == 0

    def top(self, prev: int, tok: int) -> tuple[int, float]:
        """The top-1 token at this position: the token itself when greedy, else ALT."""
        return (tok, self.logprob(prev, tok)) if self.greedy(prev, tok) else (ALT, -0.01)

    def answer(self, prompt: str) -> str:
        """A deterministic GSM8K-like generation that runs past the stop string, as a model would."""
        n = zlib.crc32(prompt.encode()) % 200
        return f" Let's think. {n} + 1 = {n + 1}, so the answer is {n + 1}.\n#### {n + 1}\n\nQuestion: next"

    # -- endpoints ------------------------------------------------------------------------------
    def completions(self, req: dict[str, Any]) -> dict[str, Any]:
        prompt = req.get("prompt", "")
        batch = prompt if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else [prompt]
        toks = [p if isinstance(p, list) else self.tokenize(str(p)) for p in batch]
        grammar = req.get("grammar")
        if grammar:
            forced = [int(t) for t in _FORCED.findall(str(grammar))]
            choices = [self._forced(t, forced) for t in toks]
        elif req.get("echo") and req.get("logprobs") is not None:
            choices = [self._echo(t, int(req.get("max_tokens") or 0)) for t in toks]
        else:
            choices = [self._generate(t, req.get("stop")) for t in toks]
        for i, c in enumerate(choices):
            c["index"] = i
        n_prompt = sum(len(t) for t in toks)
        n_out = sum(int(c.pop("_n")) for c in choices)
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
        return {"id": "cmpl-stub", "object": "text_completion", "model": req.get("model", "stub"),
                "choices": choices, "usage": usage}  # fmt: skip

    def _forced(self, ctx: list[int], forced: list[int]) -> dict[str, Any]:
        """llama.cpp's answer to a token-id grammar: per generated token, its logprob and top-1."""
        content, prev = [], ctx[-1] if ctx else EOS
        for tok in forced:
            top_id, top_lp = self.top(prev, tok)
            content.append({"id": tok, "token": self.pieces[tok], "logprob": self.logprob(prev, tok),
                            "top_logprobs": [{"id": top_id, "token": self.pieces[top_id], "logprob": top_lp}]})  # fmt: skip
            prev = tok
        return {"text": self.detokenize(forced), "logprobs": {"content": content},
                "finish_reason": "length", "_n": len(forced)}  # fmt: skip

    def _echo(self, toks: list[int], max_tokens: int) -> dict[str, Any]:
        """OpenAI legacy echo: prompt tokens (first has no logprob) plus ``max_tokens`` greedy ones."""
        seq = list(toks)
        for _ in range(max_tokens):
            seq.append(self.top(seq[-1] if seq else EOS, EOS)[0])
        lps: list[float | None] = [None]
        tops: list[dict[str, float] | None] = [None]
        for prev, tok in itertools.pairwise(seq):
            lps.append(self.logprob(prev, tok))
            top_id, top_lp = self.top(prev, tok)
            tops.append({self.pieces[top_id]: top_lp})
        tokens = [self.pieces[t] for t in seq]
        offsets, pos = [], 0
        for piece in tokens:
            offsets.append(pos)
            pos += len(piece)
        logprobs = {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
        return {"text": "".join(tokens), "logprobs": logprobs, "finish_reason": "length", "_n": max_tokens}

    def _generate(self, toks: list[int], stop: Any) -> dict[str, Any]:
        text = self.answer(self.detokenize(toks))
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        cut = min((text.index(s) for s in stops if s and s in text), default=len(text))
        reason = "stop" if cut < len(text) else "length"
        return {
            "text": text[:cut],
            "logprobs": None,
            "finish_reason": reason,
            "_n": len(self.tokenize(text[:cut])),
        }

    def handle(self, method: str, path: str, req: dict[str, Any]) -> tuple[int, Any]:
        if path == "/stub/stats":
            return 200, dict(self.counts)
        self.counts[path] = self.counts.get(path, 0) + 1
        if path == "/v1/completions" and method == "POST":
            return 200, self.completions(req)
        if path == "/tokenize" and method == "POST":
            return 200, {"tokens": self.tokenize(str(req.get("content", req.get("prompt", ""))))}
        if path == "/detokenize" and method == "POST":
            text = self.detokenize([int(t) for t in req.get("tokens", [])])
            return 200, {"content": text, "prompt": text}  # llama.cpp's key and vLLM's
        if path == "/tokenizer_info" and method == "GET":
            return 200, {"eos_token": "</s>", "bos_token": None, "pad_token": None, "chat_template": None}
        if path in ("/health", "/v1/models", "/props"):
            return 200, {"status": "ok", "data": [{"id": "stub"}]}
        return 404, {"error": {"message": f"no route {method} {path}", "code": 404}}


class _Http(asyncio.Protocol):
    """Minimal HTTP/1.1 with keep-alive and Content-Length bodies: all that httpx, aiohttp and
    requests send for JSON. Kept dependency-free so the stub costs as little CPU as possible."""

    def __init__(self, model: StubModel) -> None:
        self.model = model
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            lines = bytes(self.buf[:head_end]).decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
            end = head_end + 4 + int(headers.get("content-length", "0"))
            if len(self.buf) < end:
                return
            body = bytes(self.buf[head_end + 4 : end])
            del self.buf[:end]
            try:
                status, out = self.model.handle(
                    method, target.split("?", 1)[0], json.loads(body) if body else {}
                )
            except Exception as exc:  # a stub bug must show up as an HTTP 500, not a hang
                status, out = 500, {"error": {"message": f"{type(exc).__name__}: {exc}", "code": 500}}
            payload = json.dumps(out).encode()
            reason = {200: "OK", 404: "Not Found"}.get(status, "Internal Server Error")
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            if headers.get("connection", "").lower() == "close":
                self.transport.close()
                self.transport = None


async def _serve(port: int, lifetime_s: float, ready: Any, stop: asyncio.Event | None = None) -> None:
    loop = asyncio.get_running_loop()
    model = StubModel()
    server = await loop.create_server(lambda: _Http(model), "127.0.0.1", port, backlog=256)
    stop = stop or asyncio.Event()
    loop.call_later(lifetime_s, stop.set)  # bounded: it always stops by itself
    ready(server.sockets[0].getsockname()[1], stop, loop)
    async with server:
        await stop.wait()


@contextlib.contextmanager
def serve_in_thread(lifetime_s: float = 60.0) -> Iterator[str]:
    """The stub on a daemon thread of this process (for tests); yields its base URL."""
    got: dict[str, Any] = {}
    started = threading.Event()

    def ready(port: int, stop: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        got.update(port=port, stop=stop, loop=loop)
        started.set()

    thread = threading.Thread(target=lambda: asyncio.run(_serve(0, lifetime_s, ready)), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the stub server did not start within 10 s")
    try:
        yield f"http://127.0.0.1:{got['port']}"
    finally:
        got["loop"].call_soon_threadsafe(got["stop"].set)
        thread.join(5)


@contextlib.contextmanager
def serve_in_subprocess(lifetime_s: float = 600.0) -> Iterator[str]:
    """The stub in its own process, so it does not share the client's GIL; yields its base URL."""
    cmd = [sys.executable, os.path.abspath(__file__), "--lifetime", str(lifetime_s)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the stub server did not start: {line!r}")
        yield line
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the server exits on stdin EOF
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="instant OpenAI-compatible stub server")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--lifetime", type=float, default=600.0, help="seconds before it stops by itself")
    args = parser.parse_args(argv)

    def ready(port: int, stop: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        print(f"http://127.0.0.1:{port}", flush=True)

        def watch_stdin() -> None:  # parent gone or done: stop
            sys.stdin.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_stdin, daemon=True).start()

    asyncio.run(_serve(args.port, args.lifetime, ready))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
