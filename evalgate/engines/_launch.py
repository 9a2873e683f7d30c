"""The start every launch shares: where the server will listen and the key it will ask for."""

from __future__ import annotations

from evalgate.engines.base import free_port, new_api_key, port_in_use
from evalgate.errors import ServerStartError

__all__ = ["server_address"]


def server_address(port: int | None, name: str) -> tuple[int, str, str]:
    """(port, API key, base URL) for the ``name`` server about to launch, with a fresh key.

    A port the user named is checked first: a server that cannot bind it would otherwise fail
    minutes into a GPU start, or answer a stranger's requests on a port someone else holds."""
    if port is not None and port_in_use(port):
        raise ServerStartError(
            f"port {port} on 127.0.0.1 is already in use, so the {name} server cannot listen there",
            fix="omit --port to let evalgate pick a free port, or stop whatever holds it",
        )
    port = port or free_port()
    return port, new_api_key(), f"http://127.0.0.1:{port}"
