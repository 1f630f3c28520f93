"""The runtime spec the image test starts runc with is the rendered DaemonSet's, field by
field (tests/image/oci_runtime.py), and a setting the translation does not carry fails rather
than being dropped: the runc test cannot drift from daemonset/base. Also: the image's recipe
installs what pyproject.toml asks for."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from oci_runtime import Node, Untranslated, container_of, probes, runtime_spec
from packaging.requirements import Requirement

from conftest import ROOT
from deployment import chart_objects, find, objects

# What scripts/build-image writes into the image's configuration (test_image.py reads it back
# from a built image).
IMAGE_CONFIG = {
    "User": "10001",
    "Entrypoint": ["gpuprobe"],
    "Cmd": ["serve"],
    "WorkingDir": "/",
    "Env": ["PATH=/opt/gpuprobe/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1"],
}


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def node_for(tmp_path: Path, docs: list[dict[str, Any]]) -> Node:
    root = tmp_path / "node"
    root.mkdir()
    return Node(
        root=root,
        name="gpu-node-7",
        netns=Path("/run/netns/gp-test"),
        volumes=tmp_path / "volumes",
        config_maps={d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"},
    )


def spec_of(tmp_path: Path, docs: list[dict[str, Any]]) -> dict[str, Any]:
    return runtime_spec(pod(docs), "gpuprobe", IMAGE_CONFIG, node_for(tmp_path, docs), "/gp")


def test_the_spec_is_the_daemonsets_container(tmp_path: Path) -> None:
    docs = objects("base")
    container = container_of(pod(docs), "gpuprobe")
    spec = spec_of(tmp_path, docs)
    proc = spec["process"]
    assert proc["args"] == ["gpuprobe", *container["args"]]
    assert proc["args"][:3] == ["gpuprobe", "serve", "--root=/host"]
    assert proc["user"] == {"uid": 0, "gid": 0, "additionalGids": [4]}
    env = dict(e.split("=", 1) for e in proc["env"])
    assert env["NODE_NAME"] == "gpu-node-7"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["PATH"].startswith("/opt/gpuprobe/bin")
    assert "CAP_SYS_ADMIN" in proc["capabilities"]["bounding"]  # privileged
    assert spec["root"] == {"path": "rootfs", "readonly": True}
    namespaces = {n["type"]: n for n in spec["linux"]["namespaces"]}
    assert "pid" not in namespaces  # hostPID
    assert namespaces["network"]["path"] == "/run/netns/gp-test"
    assert spec["linux"]["resources"]["memory"] == {"limit": 512 * 2**20}
    assert spec["linux"]["resources"]["cpu"] == {"quota": 200000, "period": 100000}
    assert spec["linux"]["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    assert "maskedPaths" not in spec["linux"]
    binds = {m["destination"]: m for m in spec["mounts"] if m["type"] == "bind"}
    assert sorted(binds) == sorted(m["mountPath"] for m in container["volumeMounts"])
    host = binds["/host"]
    assert host["source"] == str(tmp_path / "node")
    assert "rro" in host["options"] and "rbind" in host["options"]
    assert binds["/host/var/lib/gpuprobe/scratch"]["source"] == str(
        tmp_path / "node" / "var" / "lib" / "gpuprobe" / "scratch"
    )
    for path in ("/etc/gpuprobe/config", "/etc/gpuprobe/token"):
        assert "ro" in binds[path]["options"]
    assert not {"ro", "rro"} & set(binds["/tmp"]["options"])
    config = Path(binds["/etc/gpuprobe/config"]["source"]) / "config.yaml"
    assert config.read_text() == (ROOT / "daemonset" / "base" / "config.yaml").read_text()
    # the optional token Secret does not exist: an empty directory, as the kubelet leaves it
    assert list(Path(binds["/etc/gpuprobe/token"]["source"]).iterdir()) == []


def test_the_probes_are_the_daemonsets(tmp_path: Path) -> None:
    container = container_of(pod(objects("base")), "gpuprobe")
    found = probes(container)
    assert found["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 9760}
    assert found["readinessProbe"]["grpc"] == {
        "port": 50051,
        "service": "gpuprobe.v1.NodeDiagnostics",
    }


def test_the_charts_default_render_gives_the_same_spec(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = spec_of(tmp_path / "a", chart_objects())
    theirs = spec_of(tmp_path / "b", objects("base"))
    for spec, where in ((ours, "a"), (theirs, "b")):
        for mount in spec["mounts"]:
            mount["source"] = mount["source"].replace(str(tmp_path / where), "T")
    assert ours == theirs


def test_the_rdma_overlay_runs_on_the_hosts_network_with_ipc_lock(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, objects("overlays/rdma"))
    assert "CAP_IPC_LOCK" in spec["process"]["capabilities"]["bounding"]


DRIFTS: dict[str, Any] = {
    "hostIPC": lambda p: p.update(hostIPC=True),
    "initContainers": lambda p: p.update(initContainers=[{"name": "x", "image": "y"}]),
    "runtimeClassName": lambda p: p.update(runtimeClassName="nvidia"),
    "a new volume kind": lambda p: (
        p["volumes"].append({"name": "host", "csi": {"driver": "x"}})
        or p["volumes"].remove(next(v for v in p["volumes"] if v["name"] == "host"))
    ),
    "subPath": lambda p: p["containers"][0]["volumeMounts"][0].update(subPath="etc"),
    "propagation": lambda p: p["containers"][0]["volumeMounts"][0].update(
        mountPropagation="HostToContainer"
    ),
    "an env from a Secret": lambda p: p["containers"][0]["env"].append(
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ),
    "a container field": lambda p: p["containers"][0].update(workingDir="/tmp"),
    "a security field": lambda p: p["containers"][0]["securityContext"].update(
        procMount="Unmasked"
    ),
    "runAsNonRoot as root": lambda p: p["securityContext"].update(runAsNonRoot=True),
    "seccomp without privileged": lambda p: p["containers"][0]["securityContext"].update(
        privileged=False
    ),
    "a required Secret": lambda p: next(v for v in p["volumes"] if v["name"] == "token")[
        "secret"
    ].update(optional=False),
}


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_a_setting_the_translation_does_not_carry_fails(tmp_path: Path, drift: str) -> None:
    docs = copy.deepcopy(objects("base"))
    DRIFTS[drift](pod(docs))
    with pytest.raises(Untranslated):
        spec_of(tmp_path, docs)


def locked() -> dict[str, tuple[str, list[str]]]:
    """scripts/image/requirements.txt: name -> (version, sha256s: x86-64's, and aarch64's
    for the packages with compiled code)."""
    found = {}
    text = (ROOT / "scripts" / "image" / "requirements.txt").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            pin, *hashes = line.split()
            name, version = pin.split("==")
            found[name] = (version, [h.removeprefix("--hash=sha256:") for h in hashes])
    return found


def test_the_lock_pins_every_dependency_of_pyproject_at_a_version_it_accepts() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = locked()
    for entry in project["dependencies"]:
        requirement = Requirement(entry)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in lock, name
        assert requirement.specifier.contains(lock[name][0]), (entry, lock[name][0])
    for name, (version, hashes) in lock.items():
        assert name == re.sub(r"[-_.]+", "-", name).lower()
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!]*", version), name
        assert 1 <= len(hashes) <= 2, name
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name
