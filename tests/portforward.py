"""A TCP port forward from one network namespace into another, run as its own process:

    ip netns exec NS python portforward.py FD HOST PORT

FD is a listening socket inherited from the parent, bound in the parent's namespace; each
connection accepted on it is joined to HOST:PORT, connected from NS. So a client outside a test
fabric (Prometheus, the test's gRPC client) reaches an agent inside it without any link added
to the outer namespace. Fabric.forward starts it; killing the process ends every connection.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until `source` ends, then end `sink`'s sending side."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def join(client: socket.socket, host: str, port: int) -> None:
    """Connect to host:port and copy both ways until both sides have ended."""
    with client:
        try:
            upstream = socket.create_connection((host, port), timeout=10)
        except OSError:
            return  # the client sees its connection closed, as with the target down
        with upstream:
            upstream.settimeout(None)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()


def main() -> None:
    fd, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listener = socket.socket(fileno=fd)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=join, args=(client, host, port), daemon=True).start()


if __name__ == "__main__":
    main()
