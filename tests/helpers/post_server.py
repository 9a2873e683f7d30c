"""A stdlib HTTP server on a free loopback port whose every POST a function answers with a status
and a JSON body: the client tests' scripted double and the guard tests' echo of secrets."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Answer", "post_server"]

Answer = Callable[[Message, bytes], tuple[int, object]]
"""(the request's headers, its body) -> (HTTP status, the JSON payload to answer with)."""


@contextmanager
def post_server(answer: Answer) -> Iterator[str]:
    """Serve ``answer`` in a background thread for the block; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            status, payload = answer(self.headers, self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
