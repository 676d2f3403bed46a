"""Is the HuggingFace Hub reachable? Asked once per process, in about a second, before a hub id is loaded.

Without it, a machine with no network spends ~25 s in the hub client's retries (and its log lines) before
falling back to the local HF cache. One TCP connection to the endpoint (`HF_ENDPOINT`, default huggingface.co;
the HTTPS proxy when one is set) within `TIMEOUT_S` answers it; name resolution runs in a thread so a resolver
that hangs is bounded by the same timeout. `HF_HUB_OFFLINE=1` skips the question: the cache is used directly.
"""
from __future__ import annotations

import os
import socket
import threading
from functools import cache
from urllib.parse import urlsplit

TIMEOUT_S = 1.5
DEFAULT_ENDPOINT = "https://huggingface.co"


def offline() -> bool:
    """HF_HUB_OFFLINE is set: only the local HF cache is read."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _address() -> tuple[str, int, str]:
    """(host, port, what to call it) the hub is reached through."""
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlsplit(proxy if proxy and endpoint.startswith("https") else endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.hostname or "", port, f"{'the proxy ' if proxy else ''}{url.hostname}:{port}"


@cache
def unreachable() -> str | None:
    """Why the hub cannot be reached from here (one clause), or None when a connection opens."""
    host, port, name = _address()
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=TIMEOUT_S).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{name}: {exc.strerror or exc.__class__.__name__}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(2 * TIMEOUT_S)
    return outcome[0] if outcome else f"{name}: no answer within {2 * TIMEOUT_S:g} s"
