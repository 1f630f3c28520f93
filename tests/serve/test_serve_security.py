"""Who may call what: read-only RPCs are open; RunChecks and ClearFindings need the token or a
client certificate; without either the agent refuses them unless started in open mode. TLS
and mTLS with certificates made at test time."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from certs import Pki, make_pki
from conftest import gpuprobe, snapshot
from gpuprobe.client import Client
from gpuprobe.credentials import TokenFile, read_token
from gpuprobe.errors import UsageError
from gpuprobe.serve.agent import ServeOptions
from gpuprobe.serve.security import bearer, server_credentials
from serving import in_process_agent

TOKEN = "0123456789abcdef"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def refused(client: Client) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        client.run_checks(["driver"])
    return err.value.code()  # type: ignore[no-any-return]


def test_token_allows_and_its_absence_or_a_wrong_one_refuses(token_file: Path) -> None:
    with in_process_agent(token_file=str(token_file)) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        with Client(target, token=TOKEN) as client:
            assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]
        with Client(target) as client:
            assert refused(client) == grpc.StatusCode.UNAUTHENTICATED
            assert client.get_report().node == "synthetic-h100-8gpu-healthy"  # read-only: open
        with Client(target, token="wrong") as client:
            assert refused(client) == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as err:
                client.clear_findings()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_rotated_token_file_is_read_again(token_file: Path) -> None:
    with in_process_agent(token_file=str(token_file)) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        token_file.write_text("rotated-token\n")
        with Client(target, token=TOKEN) as client:
            assert refused(client) == grpc.StatusCode.UNAUTHENTICATED
        with Client(target, token="rotated-token") as client:
            client.run_checks(["driver"])


def test_without_token_guarded_rpcs_are_refused_unless_open_mode() -> None:
    with in_process_agent() as agent, Client(f"127.0.0.1:{agent.grpc_port}", token="any") as client:
        assert refused(client) == grpc.StatusCode.PERMISSION_DENIED
    with (
        in_process_agent(allow_unauthenticated=True) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]


def test_tls_serves_clients_that_trust_the_ca(pki: Pki, token_file: Path) -> None:
    with in_process_agent(
        token_file=str(token_file), tls_cert=pki.server_cert, tls_key=pki.server_key
    ) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        with Client(target, ca_file=pki.ca, token=TOKEN) as client:
            assert client.get_report().status.value == "OK"
            client.run_checks(["driver"])  # the token over TLS
        with Client(target, ca_file=pki.ca) as client:
            assert refused(client) == grpc.StatusCode.UNAUTHENTICATED
        with Client(target) as client:  # plaintext to a TLS port
            with pytest.raises(grpc.RpcError) as err:
                client.get_report(timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        stranger_ca = str(Path(pki.ca).with_name("stranger-ca.crt"))
        with Client(target, ca_file=stranger_ca) as client:  # does not trust the server
            with pytest.raises(grpc.RpcError) as err:
                client.get_report(timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_client_certificate_authorises_and_strangers_are_turned_away(pki: Pki) -> None:
    with in_process_agent(
        tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
    ) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        with Client(
            target, ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key
        ) as client:
            assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]
        for cert, key in [(None, None), (pki.stranger_cert, pki.stranger_key)]:
            with Client(target, ca_file=pki.ca, cert_file=cert, key_file=key) as client:
                with pytest.raises(grpc.RpcError) as err:
                    client.get_report(timeout=3)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_tls_flags_must_come_in_pairs(pki: Pki) -> None:
    with pytest.raises(UsageError, match="--tls-cert and --tls-key go together"):
        ServeOptions(tls_cert=pki.server_cert)
    with pytest.raises(UsageError, match="--tls-client-ca needs --tls-cert"):
        ServeOptions(tls_client_ca=pki.ca)
    with pytest.raises(UsageError, match=r"--tls-key .*: not a PEM file"):
        server_credentials(pki.server_cert, __file__, None)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"", "empty or holds whitespace"),
        (b"two words", "empty or holds whitespace"),
        (b"\xff\xfe", "not ASCII text"),
        (b"x" * 5000, "over 4096 bytes"),
    ],
)
def test_bad_token_files_are_usage_errors(tmp_path: Path, content: bytes, error: str) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=error):
        read_token(str(path))
    with pytest.raises(UsageError, match="No such file"):
        TokenFile(str(tmp_path / "absent" / "token"))  # a wrong path (its directory too)


def test_a_token_file_going_bad_keeps_the_last_good_token(token_file: Path) -> None:
    source = TokenFile(str(token_file))
    token_file.write_text("")
    assert source.token() == TOKEN
    token_file.unlink()
    assert source.token() == TOKEN


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ([("authorization", "Bearer abc")], "abc"),
        ([("authorization", "bearer   abc ")], "abc"),
        ([("authorization", "Basic abc")], None),
        ([("authorization", "Bearer ")], None),
        ([("x-other", "Bearer abc")], None),
        (None, None),
    ],
)
def test_bearer_reads_the_authorization_metadata(
    metadata: list[tuple[str, str]] | None, token: str | None
) -> None:
    assert bearer(metadata) == token


def test_a_token_file_not_created_yet_keeps_the_guarded_rpcs_closed_until_it_is(
    tmp_path: Path,
) -> None:
    """The DaemonSet mounts the Secret gpuprobe-token as optional: the pods start before it
    exists, with an empty directory where it will be. The agent starts, refuses the guarded
    RPCs to everyone (no token is no open door), and takes the token once the kubelet writes
    it, the way it projects a Secret volume (..data, a link to a timestamped directory)."""
    mount = tmp_path / "token-mount"
    mount.mkdir()
    path = mount / "token"
    assert TokenFile(str(path)).pending() and TokenFile(str(path)).token() is None
    with in_process_agent(token_file=str(path)) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        for presented in (None, TOKEN, "anything"):
            with Client(target, token=presented) as client:
                with pytest.raises(grpc.RpcError) as err:
                    client.run_checks(["driver"])
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "does not exist yet" in (err.value.details() or "")
                assert client.get_report().status.value  # read-only RPCs stay open
        (mount / "..2026_12_02_09_50_00.1").mkdir()
        (mount / "..2026_12_02_09_50_00.1" / "token").write_text(TOKEN)
        (mount / "..data").symlink_to("..2026_12_02_09_50_00.1")
        path.symlink_to("..data/token")
        with Client(target, token=TOKEN) as client:
            assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]
        with Client(target, token="wrong") as client:
            assert refused(client) == grpc.StatusCode.UNAUTHENTICATED


def test_a_token_path_whose_directory_does_not_exist_is_still_a_usage_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="No such file or directory"):
        TokenFile(str(tmp_path / "no-such-dir" / "token"))


def _mismatched_files(pki: Pki, directory: Path) -> dict[str, tuple[str, str]]:
    """Certificate and key pairs that do not belong together, as operators mount them: another
    certificate's key of the same algorithm, an RSA key beside the EC certificate, the two
    swapped, the key encrypted, the key's PEM damaged, the certificate's PEM damaged."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = directory / "rsa.key"
    rsa_key.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    encrypted = directory / "encrypted.key"
    key = serialization.load_pem_private_key(Path(pki.server_key).read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    damaged_key, damaged_cert = directory / "damaged.key", directory / "damaged.crt"
    lines = Path(pki.server_key).read_text().splitlines()
    damaged_key.write_text("\n".join([lines[0], lines[1][:20], lines[-1]]) + "\n")
    lines = Path(pki.server_cert).read_text().splitlines()
    damaged_cert.write_text("\n".join([lines[0], lines[1][:20], lines[-1]]) + "\n")
    return {
        "another key": (pki.server_cert, pki.client_key),
        "another algorithm": (pki.server_cert, str(rsa_key)),
        "swapped": (pki.server_key, pki.server_cert),
        "encrypted": (pki.server_cert, str(encrypted)),
        "damaged key": (pki.server_cert, str(damaged_key)),
        "damaged certificate": (str(damaged_cert), pki.server_key),
    }


def _why(
    case: str, cert: str, key: str, flags: tuple[str, str] = ("--tls-cert", "--tls-key")
) -> str:
    c, k = flags
    return {
        "another key": f"{k} {key} is not the private key of the certificate in {c} {cert} (the "
        "certificate was issued for another key): give the key it was issued for",
        "another algorithm": f"{k} {key} is not the private key of the certificate in {c} "
        f"{cert} (the certificate was issued for another key): give the key it was issued for",
        "swapped": f"{c} {cert}: holds a private key, not a certificate ({k} {key} holds the "
        "certificate: the two are swapped)",
        "encrypted": f"{k} {key}: the private key is encrypted with a passphrase; give it "
        "unencrypted (as a Kubernetes TLS Secret holds it)",
        "damaged key": f"{k} {key}: its private key cannot be read",
        "damaged certificate": f"{c} {cert}: its certificate cannot be read (a damaged PEM block)",
    }[case]


CASES = ["another key", "another algorithm", "swapped", "encrypted", "damaged key",
         "damaged certificate"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_serve_names_the_tls_file_that_is_wrong(pki: Pki, tmp_path: Path, case: str) -> None:
    """A certificate and key that do not belong together said "--grpc-listen …: cannot listen
    (gRPC refused the address)" (issue 40 item 5): they are read and matched first, and the
    file that is wrong is named, in one line, exit 64."""
    cert, key = _mismatched_files(pki, tmp_path)[case]
    done = gpuprobe(
        "serve", "--snapshot", snapshot("kvm-epyc-nogpu"), "--grpc-listen", "127.0.0.1:0",
        "--metrics-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (64, "")
    assert done.stderr == f"gpuprobe: {_why(case, cert, key)} (see gpuprobe serve --help)\n"


def test_clients_and_the_peer_certificate_are_matched_too(pki: Pki, tmp_path: Path) -> None:
    """The same class on the calling side: `audit`'s client certificate, the agent's own
    certificate for its peers (--tls-client-cert), and the CA bundles."""
    cert, key = _mismatched_files(pki, tmp_path)["another key"]
    done = gpuprobe(
        "audit", "--targets", "127.0.0.1:9", "--tls-ca", pki.ca, "--tls-cert", cert,
        "--tls-key", key,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (
        64,
        f"gpuprobe: {_why('another key', cert, key)} (see gpuprobe audit --help)\n",
    )
    with pytest.raises(UsageError) as err:
        Client("127.0.0.1:9", ca_file=pki.ca, cert_file=cert, key_file=key)
    assert str(err.value) == _why("another key", cert, key)
    flags = ("--tls-client-cert", "--tls-client-key")
    with pytest.raises(UsageError) as err, in_process_agent(
        tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca,
        tls_client_cert=cert, tls_client_key=key,
    ):  # fmt: skip
        pass
    assert str(err.value) == _why("another key", cert, key, flags)
    with pytest.raises(UsageError) as err:
        server_credentials(pki.server_cert, pki.server_key, pki.server_key)
    assert str(err.value) == (
        f"--tls-client-ca {pki.server_key}: holds a private key, not a CA certificate"
    )
    # A matching pair, and a certificate file that also holds its key, are taken.
    combined = tmp_path / "combined.pem"
    combined.write_text(Path(pki.server_cert).read_text() + Path(pki.server_key).read_text())
    server_credentials(pki.server_cert, pki.server_key, pki.ca)
    server_credentials(str(combined), pki.server_key, None)
