"""Reading the credentials agents and their callers share: the bearer token and PEM files.

Both sides of the API read them the same way: the agent (`gpuprobe serve --token-file`, its
TLS flags) and every client (`audit`, `mesh`, `gpuprobe.client`). Each bad file is a usage
error naming its flag, never a traceback.
"""

from __future__ import annotations

import os
import re
import ssl
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


# PEM block labels (RFC 7468): a certificate, and a private key in PKCS #8 or the older
# per-algorithm forms; an encrypted key is PKCS #8's ENCRYPTED PRIVATE KEY or OpenSSL's legacy
# "Proc-Type: 4,ENCRYPTED" header.
_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:RSA |EC |DSA |ENCRYPTED )?PRIVATE KEY-----")
_ENCRYPTED = re.compile(rb"-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED")
# OpenSSL's reasons when a readable key is not the certificate's (the same algorithm, another
# key; another algorithm).
_MISMATCH = {"KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED"}


def check_key_pair(cert_file: str, key_file: str, cert_flag: str, key_flag: str) -> None:
    """Read a TLS certificate and its private key and match them before any server or
    channel uses them: raises UsageError naming the file that is wrong (a key where the
    certificate goes, both swapped, an unreadable or encrypted key, a key that is not the
    certificate's), instead of gRPC's later "cannot listen" or a refused handshake."""
    cert, key = read_pem(cert_file, cert_flag), read_pem(key_file, key_flag)
    swapped = _CERTIFICATE in key and _PRIVATE_KEY.search(cert) is not None
    if _CERTIFICATE not in cert:
        what = "a private key" if _PRIVATE_KEY.search(cert) else "no certificate"
        also = f" ({key_flag} {key_file} holds the certificate: the two are swapped)"
        raise UsageError(
            f"{cert_flag} {cert_file}: holds {what}, not a certificate{also if swapped else ''}"
        )
    if _PRIVATE_KEY.search(key) is None:
        what = "a certificate" if _CERTIFICATE in key else "no private key"
        raise UsageError(f"{key_flag} {key_file}: holds {what}, not a private key")
    if _ENCRYPTED.search(key):
        raise UsageError(
            f"{key_flag} {key_file}: the private key is encrypted with a passphrase; give it "
            "unencrypted (as a Kubernetes TLS Secret holds it)"
        )
    try:
        ssl.create_default_context().load_verify_locations(cadata=cert.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise UsageError(
            f"{cert_flag} {cert_file}: its certificate cannot be read (a damaged PEM block)"
        ) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason in _MISMATCH:
            raise UsageError(
                f"{key_flag} {key_file} is not the private key of the certificate in "
                f"{cert_flag} {cert_file} (the certificate was issued for another key): give "
                "the key it was issued for"
            ) from None
        raise UsageError(f"{key_flag} {key_file}: its private key cannot be read") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{key_flag} {key_file}: its private key cannot be read ({exc})") from None


def check_ca(ca_file: str, flag: str) -> None:
    """Read a CA bundle: raises UsageError naming the flag when it holds no certificate that
    can be read."""
    data = read_pem(ca_file, flag)
    if _CERTIFICATE not in data:
        what = "a private key" if _PRIVATE_KEY.search(data) else "no certificate"
        raise UsageError(f"{flag} {ca_file}: holds {what}, not a CA certificate")
    try:
        ssl.create_default_context().load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise UsageError(
            f"{flag} {ca_file}: its certificate cannot be read (a damaged PEM block)"
        ) from None


def _no_passphrase() -> bytes:
    # Never prompt on the terminal for a key's passphrase: an encrypted key is refused above.
    raise ValueError("the private key is encrypted")
