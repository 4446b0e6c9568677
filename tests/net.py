"""Small network helpers for tests that start their own servers (loopback only)."""

from __future__ import annotations

import socket


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
