"""Serving a worker with uvicorn, bound before it runs so callers (tests especially) can use port 0
and learn the real address."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn


async def serve(app: Any, host: str = "127.0.0.1", port: int = 8081, *, announce: bool = True) -> None:
    """Serves ``app`` on ``host:port`` until cancelled or interrupted. Prints ``listening on
    http://host:port/`` once bound (port 0 picks a free port)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the announcement: a bound socket that does not listen yet refuses
    # connections, and a caller that read the line may connect at once (uvicorn would only
    # start listening once its startup ran).
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    if announce:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(f"listening on http://{shown}:{bound_port}/", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


def run(app: Any, host: str = "127.0.0.1", port: int = 8081) -> None:
    """Blocking :func:`serve` for scripts."""
    asyncio.run(serve(app, host, port))
