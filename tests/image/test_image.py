"""The image, built and started for real: scripts/build-image writes an OCI archive from
Debian's packages and the project's wheels (no registry, no daemon); skopeo reads it; umoci
unpacks it; runc starts it as daemonset/base runs it (the runtime spec derived from the
rendered DaemonSet: tests/image/runtime.py) in a network namespace this test makes, where the
kubelet's probes, /metrics and GetReport answer, and SIGTERM ends it with exit status 0.

The build is slow (about a minute here, most of it mmdebstrap): the module builds once, and
builds a second time only to show that two builds give one digest (the second reuses the
first's downloaded packages and wheels)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import pytest
from built_image import Built, build
from oci_runtime import Node, container_of, probes, remove_created, runtime_spec
from pyroute2 import NetNS, netns

from conftest import ROOT, require_root, require_tool
from deployment import find, objects

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("image"), pytest.mark.timeout(1500)]

PROBE = Path(__file__).with_name("probe.py")
MIB = 2**20
# The bounds: unpacked size, and the start (runc run) to answering everything.
MAX_UNPACKED_BYTES = 150 * MIB
READY_WITHIN_SECONDS = 40


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gp-image-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def image(workdir: Path) -> Built:
    require_root()
    require_tool("mmdebstrap")
    require_tool("umoci")
    require_tool("skopeo")
    require_tool("runc")
    require_tool("ip")
    out = workdir / "first"
    out.mkdir()
    built = build(out)
    print(f"\nfirst build: {built.seconds:.1f} s; {built.output.strip()}")
    return built


@pytest.fixture(scope="module")
def rootfs(image: Built, workdir: Path) -> Path:
    return image.unpack(workdir / "unpacked") / "rootfs"


def pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def test_skopeo_reads_the_archive_and_its_labels_name_this_commit(image: Built) -> None:
    out = subprocess.run(
        ["skopeo", "inspect", f"oci-archive:{image.archive}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    inspected = json.loads(out.stdout)
    assert inspected["Digest"] == image.digest
    assert (inspected["Os"], inspected["Architecture"]) == ("linux", "amd64")
    assert len(inspected["Layers"]) == 1
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    labels = inspected["Labels"]
    assert labels["org.opencontainers.image.version"] == pyproject()["version"]
    assert labels["org.opencontainers.image.licenses"] == pyproject()["license"]
    assert labels["org.opencontainers.image.revision"] in (commit, commit + "-dirty")
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert labels["org.opencontainers.image.title"] == "gpuprobe"
    # the archive's tag is the version, as `skopeo copy oci-archive:OUT.tar docker://R/gpuprobe:V`
    assert image.tag == pyproject()["version"]


def test_the_image_starts_as_the_dockerfile_says(image: Built) -> None:
    """Same entrypoint, command, user, ports and environment as the Dockerfile's final stage
    (docs/deploy.md: the two are one image)."""
    config = image.image_config()["config"]
    assert config["Entrypoint"] == ["gpuprobe"]
    assert config["Cmd"] == ["serve"]
    assert config["User"] == "10001"
    assert set(config["ExposedPorts"]) == {"50051/tcp", "9760/tcp"}
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/gpuprobe/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_small_and_nothing_to_install_or_compile_with(rootfs: Path) -> None:
    files = [p for p in rootfs.rglob("*") if p.is_file() and not p.is_symlink()]
    unpacked = sum(p.stat().st_size for p in files)
    print(f"\nunpacked: {unpacked / MIB:.1f} MiB in {len(files)} files")
    assert unpacked <= MAX_UNPACKED_BYTES
    site = next((rootfs / "opt" / "gpuprobe" / "lib").glob("python3.*/site-packages"))
    assert (site / "gpuprobe" / "__main__.py").is_file()
    assert (
        (rootfs / "opt" / "gpuprobe" / "bin" / "gpuprobe")
        .read_text()
        .startswith("#!/opt/gpuprobe/bin/python")
    )
    assert not list(site.glob("pip*")) and not list(site.glob("setuptools*"))
    bins = {
        p.name for d in ("usr/bin", "usr/sbin", "opt/gpuprobe/bin") for p in (rootfs / d).iterdir()
    }
    for tool in ("pip", "pip3", "apt", "apt-get", "dpkg", "dpkg-deb", "gcc", "cc", "ld", "as",
                 "make", "python3-config"):  # fmt: skip
        assert tool not in bins, tool
    assert not (rootfs / "usr" / "lib" / "python3.11" / "ensurepip").exists()
    # dpkg's database stays for scanners (trivy, grype read it)
    assert (rootfs / "var" / "lib" / "dpkg" / "status").is_file()
    # the user of the Dockerfile's useradd
    assert "gpuprobe:x:10001:" in (rootfs / "etc" / "passwd").read_text()


def test_the_sbom_lists_every_package_with_its_version(image: Built, rootfs: Path) -> None:
    sbom = json.loads(image.sbom.read_text())
    assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.5")
    # valid by CycloneDX's own schema (strict: no field it does not define)
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    validator = JsonStrictValidator(SchemaVersion.V1_5)
    assert validator.validate_str(image.sbom.read_text()) is None
    broken = dict(sbom, components=[{**sbom["components"][0], "version": 3}])
    assert validator.validate_str(json.dumps(broken)) is not None  # it would see a fault
    assert sbom["metadata"]["component"]["hashes"] == [
        {"alg": "SHA-256", "content": image.digest.split(":", 1)[1]}
    ]
    components = {(c["purl"].split("/")[0], c["name"]): c["version"] for c in sbom["components"]}
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text()
    debian = {
        fields["Package"]: fields["Version"]
        for fields in (
            dict(
                line.split(": ", 1)
                for line in paragraph.splitlines()
                if ": " in line and not line.startswith(" ")
            )
            for paragraph in status.split("\n\n")
            if paragraph.strip()
        )
        if fields.get("Status") == "install ok installed"
    }
    assert {n: v for (kind, n), v in components.items() if kind == "pkg:deb"} == debian
    site = next((rootfs / "opt" / "gpuprobe" / "lib").glob("python3.*/site-packages"))
    python = {d.metadata["Name"]: d.version for d in distributions(path=[str(site)])}
    assert {n: v for (kind, n), v in components.items() if kind == "pkg:pypi"} == python
    assert components[("pkg:pypi", "gpuprobe")] == pyproject()["version"]
    assert ("pkg:pypi", "grpcio") in components
    assert components[("pkg:deb", "python3")].startswith("3.11.")


@pytest.fixture
def node(workdir: Path) -> Iterator[Node]:
    """The pod's node: this machine's `/` (read-only at /host, as the DaemonSet mounts it),
    a network namespace made for the pod (only loopback in it), and the kubelet's volume
    directories."""
    name = f"gp-img-{uuid.uuid4().hex[:6]}"
    netns.create(name)
    volumes = workdir / f"volumes-{name}"
    volumes.mkdir()
    made = Node(root=Path("/"), name="gpu-node-image", netns=Path("/run/netns") / name,
                volumes=volumes)  # fmt: skip
    try:
        with NetNS(name) as ns:
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        yield made
    finally:
        remove_created(made)
        netns.remove(name)
        shutil.rmtree(volumes, ignore_errors=True)


def test_started_as_the_daemonset_runs_it_it_answers_and_ends_cleanly(
    image: Built, workdir: Path, node: Node
) -> None:
    docs = objects("base")
    pod = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    node.config_maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    bundle = image.unpack(workdir / "run")
    container = container_of(pod, "gpuprobe")
    cid = node.netns.name
    spec = runtime_spec(pod, "gpuprobe", image.image_config()["config"], node, f"/{cid}")
    (bundle / "config.json").write_text(json.dumps(spec, indent=2))
    state = workdir / "runc-state"
    runc = ["runc", "--root", str(state)]
    kubelet = probes(container)
    grpc_port = kubelet["readinessProbe"]["grpc"]["port"]
    metrics_port = kubelet["livenessProbe"]["httpGet"]["port"]
    assert kubelet["livenessProbe"]["httpGet"]["path"] == "/healthz"
    log = (workdir / "agent.log").open("w+")
    started = time.monotonic()
    agent = subprocess.Popen(
        [*runc, "run", "--bundle", str(bundle), cid],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        asked = subprocess.run(
            ["ip", "netns", "exec", node.netns.name, sys.executable, str(PROBE),
             "--metrics", str(metrics_port), "--grpc", str(grpc_port),
             "--health-service", kubelet["readinessProbe"]["grpc"]["service"],
             "--deadline", str(READY_WITHIN_SECONDS)],
            capture_output=True, text=True, timeout=READY_WITHIN_SECONDS + 30, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT / "agent")},
        )  # fmt: skip
        answered = time.monotonic() - started
        log.seek(0)
        logs = log.read()
        assert asked.returncode == 0, asked.stderr + logs
        found = json.loads(asked.stdout)
        assert set(found) == {"healthz", "ready", "report", "metrics"}, (found, logs)
        print(f"\nstart to all answered: {answered:.1f} s; {json.dumps(found)}")
        assert answered < READY_WITHIN_SECONDS
        assert found["healthz"]["status"] == 200
        report = found["report"]
        assert report["node"] == "gpu-node-image"  # NODE_NAME from spec.nodeName
        assert set(report["checks"]) >= {"driver", "gpus", "xid", "toolkit", "network"}
        assert "gpuprobe_node_status" in found["metrics"]["families"]
        # the agent runs as root, its root file system read-only, the node's read-only at /host
        status = subprocess.run(
            [*runc, "exec", cid, "python3", "-c",
             "import os;"
             "print(os.getuid(), sorted(os.getgroups()));"
             "[print(p, os.access(p, os.W_OK)) for p in ('/', '/host', '/host/proc', '/tmp',"
             " '/var/lib/gpuprobe', '/host/var/lib/gpuprobe/scratch')]"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        uid, groups = lines[0].split(" ", 1)
        assert uid == "0" and "4" in groups  # root, and adm for the node's syslog files
        # os.access answers for the mount's flags: read-only at / and all through /host (its
        # submounts too: rro), writable where the DaemonSet gives it room
        assert lines[1:] == [
            "/ False",
            "/host False",
            "/host/proc False",
            "/tmp True",
            "/var/lib/gpuprobe True",
            "/host/var/lib/gpuprobe/scratch True",
        ]
        subprocess.run([*runc, "kill", cid, "TERM"], check=True, timeout=10)
        code = agent.wait(timeout=pod["terminationGracePeriodSeconds"])
        log.seek(0)
        logs = log.read()
        assert code == 0, logs
        last = json.loads(logs.strip().splitlines()[-1])
        assert last["level"] in ("info", "INFO"), last
    finally:
        if agent.poll() is None:
            subprocess.run([*runc, "kill", cid, "KILL"], check=False, timeout=10)
            agent.wait(timeout=30)
        subprocess.run([*runc, "delete", "--force", cid], check=False, timeout=30)
        log.close()


def test_two_builds_give_one_digest(image: Built, workdir: Path) -> None:
    out = workdir / "second"
    out.mkdir()
    again = build(out)
    print(f"\nsecond build (downloads cached): {again.seconds:.1f} s")
    assert again.digest == image.digest
    assert again.archive.read_bytes() == image.archive.read_bytes()
    assert again.sbom.read_text() == image.sbom.read_text()
