"""Reaching a Dask cluster for a sweep's runs: a scheduler address checked before any work
(:func:`parse_scheduler`) and a client connected with a bounded handshake (:func:`connect`).
Dask is optional (``kvsim[cluster]``): it is imported only when an address is given."""

from __future__ import annotations

import json
import logging
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from kvsim.errors import InputError, clean

CONNECT_TIMEOUT = 10.0  # seconds for the Dask handshake (kvsim waits 1.5 times as long)


def parse_scheduler(address: str) -> tuple[str, int]:
    """(host, port) of a Dask scheduler address ``tcp://HOST:PORT`` (or ``HOST:PORT``);
    anything else is refused before any work (other protocols need settings kvsim does
    not pass, and ``inproc://`` only reaches schedulers inside the same process)."""
    shown = json.dumps(address)[1:-1][:120]
    where = f"--scheduler {shown}"
    usage = "expected tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786"
    text = address.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise InputError(f"not an address; {usage}", where=where)
    if "://" not in text:
        text = "tcp://" + text
    scheme = text.split("://", 1)[0].lower()
    if scheme != "tcp":
        raise InputError(f"the {scheme}:// protocol is not supported; {usage}", where=where)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise InputError(f"bad port ({e}); {usage}", where=where) from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise InputError(f"not an address; {usage}", where=where)
    if not parts.hostname:
        raise InputError(f"no host; {usage}", where=where)
    if port is None:
        raise InputError(f"no port; {usage}", where=where)
    if not 0 < port < 65536:
        raise InputError(f"port {port} is out of range (1-65535); {usage}", where=where)
    return parts.hostname, port


def connect(scheduler: str) -> Any:
    """A Dask client on a reachable scheduler, or InputError (before any output exists)."""
    host, port = parse_scheduler(scheduler)
    where = f"--scheduler {scheduler}"
    try:
        from dask.distributed import Client
    except ImportError:
        raise InputError(
            "Dask is not installed: pip install 'kvsim[cluster]'", where="--scheduler"
        ) from None
    # Dask logs a lost connection with tracebacks of its own; kvsim reports it in one line
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise InputError(f"cannot reach the Dask scheduler: {reason}", where=where) from None
    address = f"tcp://{host}:{port}" if ":" not in host else f"tcp://[{host}]:{port}"
    # The handshake runs in a thread with a bounded wait: a peer that accepts the connection
    # but never answers would hang Client() for ever, and one that is not a Dask scheduler
    # (a web server, say) makes Dask fail in arbitrary ways (even a 3 EiB allocation).
    box: dict[str, Any] = {}

    def handshake() -> None:
        try:
            box["client"] = Client(address, timeout=f"{CONNECT_TIMEOUT}s")
        except BaseException as e:  # reported by the caller, in one line
            box["error"] = e

    thread = threading.Thread(target=handshake, name="kvsim-dask-connect", daemon=True)
    thread.start()
    wait_s = CONNECT_TIMEOUT * 1.5  # Dask's own timeout first, when it works
    thread.join(wait_s)
    not_dask = "not a Dask scheduler, or kvsim cannot talk to it"
    if thread.is_alive():
        raise InputError(f"{not_dask}: no handshake within {wait_s:g} s", where=where)
    if "error" in box:
        e = box["error"]
        if isinstance(e, KeyboardInterrupt):
            raise e
        reason = clean(str(e) or type(e).__name__, 160)
        raise InputError(f"{not_dask} ({type(e).__name__}: {reason})", where=where)
    return box["client"]
