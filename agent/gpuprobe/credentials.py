"""Reading the credentials agents and their callers share: the bearer token and PEM files.

Both sides of the API read them the same way: the agent (`gpuprobe serve --token-file`, its
TLS flags) and every client (`audit`, `mesh`, `gpuprobe.client`). Each bad file is a usage
error naming its flag, never a traceback.
"""

from __future__ import annotations

import os
import threading

from gpuprobe.errors import UsageError

# A token file bigger than this is not a token (a wrong path, e.g. a whole kubeconfig).
MAX_TOKEN_BYTES = 4096


class TokenFile:
    """The bearer token in a file, re-read when the file changes (a rotated Secret).

    A file missing from a directory that exists is a token not created yet: the DaemonSet
    mounts the Secret gpuprobe-token as optional, so the pods start before it exists, with
    an empty directory there. Until the file appears `token()` is None, and the guarded RPCs
    stay closed (secure by default); then it is read like any change. A file that exists but
    is bad, or a directory that does not exist (a wrong path), is a usage error at start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token: str | None = None
        if self.pending():
            return
        self._token = read_token(path)  # a bad file at start is a usage error
        self._stamp = self._stat()

    def pending(self) -> bool:
        """Whether the file is not there yet, in a directory that is (an optional Secret
        not created yet)."""
        return not os.path.lexists(self.path) and os.path.isdir(os.path.dirname(self.path) or ".")

    def token(self) -> str | None:
        """The current token; the last good one when the file became unreadable; None while
        the file has never existed."""
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            with self._lock:
                try:
                    self._token = read_token(self.path)
                    self._stamp = stamp
                except UsageError:
                    pass  # a Secret mid-update: keep the last good token
        return self._token

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino)


def read_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped); raises UsageError."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--token-file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise UsageError(f"--token-file {path}: over {MAX_TOKEN_BYTES} bytes, not a token")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UsageError(f"--token-file {path}: not ASCII text") from None
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"--token-file {path}: empty or holds whitespace inside the token")
    return token


def read_pem(path: str, flag: str) -> bytes:
    """A PEM file's bytes, for the TLS flag `flag`; raises UsageError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise UsageError(f"{flag} {path}: not a PEM file")
    return data
