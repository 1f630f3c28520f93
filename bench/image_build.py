"""The image: how long scripts/build-image takes with a cold and with a warm download cache,
how big the result is (the layer as pushed, and unpacked), and how long the agent in it takes
from `runc run` to answering the kubelet's probes, GetReport and /metrics, started as
daemonset/base runs it (tests/image/oci_runtime.py's runtime spec).

    sudo .venv/bin/python bench/image_build.py [--starts 5]

Needs root, mmdebstrap, umoci, runc, ip; deb.debian.org and the Python package index.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "image")]

from built_image import BUILD, Built  # noqa: E402
from oci_runtime import Node, container_of, probes, remove_created, runtime_spec  # noqa: E402
from pyroute2 import NetNS, netns  # noqa: E402

from deployment import find, objects  # noqa: E402

PROBE = ROOT / "tests" / "image" / "probe.py"


def build(out: Path, cache: Path) -> Built:
    archive = out / "gpuprobe.tar"
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(BUILD), str(archive), "--cache", str(cache)],
        check=True,
        capture_output=True,
        text=True,
    )
    return Built(archive, out / "gpuprobe.cdx.json", time.monotonic() - started, "")


def sizes(built: Built) -> tuple[int, int]:
    """(the layer's compressed bytes, its files' bytes unpacked)."""
    manifest = built.blob(built.digest)
    (layer,) = manifest["layers"]
    with tarfile.open(built.archive) as tar:
        blob = tar.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1])
        assert blob is not None
        with tarfile.open(fileobj=blob, mode="r|gz") as inner:
            unpacked = sum(m.size for m in inner if m.isfile())
    return int(layer["size"]), unpacked


def start_to_ready(built: Built, work: Path) -> float:
    """Seconds from `runc run` to the probe's four answers (one start)."""
    docs = objects("base")
    pod = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    name = f"gp-bench-{uuid.uuid4().hex[:6]}"
    netns.create(name)
    node = Node(
        root=Path("/"),
        name="gpu-node-bench",
        netns=Path("/run/netns") / name,
        volumes=work / f"volumes-{name}",
        config_maps={d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"},
    )
    runc = ["runc", "--root", str(work / "runc-state")]
    agent = None
    try:
        with NetNS(name) as ns:
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        bundle = built.unpack(work / name)
        spec = runtime_spec(pod, "gpuprobe", built.image_config()["config"], node, f"/{name}")
        (bundle / "config.json").write_text(json.dumps(spec))
        kubelet = probes(container_of(pod, "gpuprobe"))
        started = time.monotonic()
        agent = subprocess.Popen(
            [*runc, "run", "--bundle", str(bundle), name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        asked = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, str(PROBE),
             "--metrics", str(kubelet["livenessProbe"]["httpGet"]["port"]),
             "--grpc", str(kubelet["readinessProbe"]["grpc"]["port"]),
             "--health-service", kubelet["readinessProbe"]["grpc"]["service"],
             "--deadline", "40"],
            capture_output=True, text=True, check=True,
            env={"PYTHONPATH": str(ROOT / "agent"), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        seconds = time.monotonic() - started
        assert set(json.loads(asked.stdout)) == {"healthz", "ready", "report", "metrics"}
        subprocess.run([*runc, "kill", name, "TERM"], check=True)
        assert agent.wait(timeout=30) == 0
        return seconds
    finally:
        if agent is not None and agent.poll() is None:
            subprocess.run([*runc, "kill", name, "KILL"], check=False)
            agent.wait(timeout=30)
        subprocess.run([*runc, "delete", "--force", name], check=False, capture_output=True)
        remove_created(node)
        netns.remove(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gp-bench-image-", dir="/tmp"))
    try:
        cache = work / "cache"  # empty: the first build downloads everything
        (work / "cold").mkdir()
        (work / "warm").mkdir()
        cold = build(work / "cold", cache)
        warm = build(work / "warm", cache)
        compressed, unpacked = sizes(cold)
        sbom = json.loads(cold.sbom.read_text())
        kinds = [c["purl"].split("/")[0] for c in sbom["components"]]
        starts = [start_to_ready(cold, work) for _ in range(args.starts)]
        same = "the same" if warm.digest == cold.digest else "DIFFERENT"
        print(f"digest {cold.digest}; the warm build's: {same}")
        print(f"build, cold cache: {cold.seconds:.1f} s; warm cache: {warm.seconds:.1f} s")
        print(
            f"layer: {compressed / 2**20:.1f} MiB compressed, {unpacked / 2**20:.1f} MiB unpacked"
        )
        print(f"packages: {kinds.count('pkg:deb')} Debian, {kinds.count('pkg:pypi')} Python")
        print(
            f"runc run to ready (probes, GetReport, /metrics), {len(starts)} starts: median "
            f"{statistics.median(starts):.2f} s, range {min(starts):.2f}-{max(starts):.2f} s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
