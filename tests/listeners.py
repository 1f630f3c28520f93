"""Foreign services on loopback that a bandwidth sender may be aimed at."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def trickling_listener(interval: float = 1.0) -> Iterator[int]:
    """A listener that answers every connection one byte per `interval` seconds, forever
    (a slow or hostile service: each byte comes well within any one read's timeout);
    yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            while not stop.wait(interval):
                try:
                    conn.sendall(b"x")
                except OSError:  # the sender gave up and closed
                    return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()
