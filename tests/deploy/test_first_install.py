"""The first install an operator would apply: the agent needs no GPU runtime (it must start
where the runtime it diagnoses is broken), the shipped configuration runs no active storage
test by default, and the install works without a hand-made Secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from conftest import snapshot
from deployment import KUSTOMIZATIONS, find, objects
from gpuprobe.checks.registry import sections
from gpuprobe.checks.storage import NAME as STORAGE
from gpuprobe.checks.storage import StorageConfig
from gpuprobe.client import Client
from gpuprobe.config import load_config
from serving import serve_process, wait_for

# The installs that run the agent (the auditor's and the NCCL mesh's roles are applied apart,
# without a pod).
AGENT_INSTALLS = [k for k in KUSTOMIZATIONS if k not in ("auditor", "mesh-nccl")]

# What the shipped configuration's active storage test may write per round by default, as
# its comment and docs/deploy.md ("Configuration") say: nothing, it is opt-in.
DOCUMENTED_DEFAULT_STORAGE_BYTES = 0


def pod_spec(kustomization: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects(kustomization), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def shipped_config(kustomization: str) -> str:
    (config_map,) = [
        d
        for d in objects(kustomization)
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpuprobe-config-")
    ]
    text: str = config_map["data"]["config.yaml"]
    return text


@pytest.mark.parametrize("kustomization", AGENT_INSTALLS)
def test_the_pod_needs_no_gpu_runtime(kustomization: str) -> None:
    """No RuntimeClass, no GPU from the scheduler, and the NVIDIA runtime told to leave the
    container alone where it is the node's default; NVML comes from the host under --root."""
    spec = pod_spec(kustomization)
    assert "runtimeClassName" not in spec
    assert not [d for d in objects(kustomization) if d["kind"] == "RuntimeClass"]
    (container,) = spec["containers"]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not {k for k in env if k.startswith("NVIDIA_") and k != "NVIDIA_VISIBLE_DEVICES"}
    # the host's libnvidia-ml is loaded from under --root (gpuprobe.host.nvml_library)
    assert "--root=/host" in container["args"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/host"]["readOnly"] is True


@pytest.mark.parametrize("kustomization", AGENT_INSTALLS)
def test_no_default_active_storage_test_larger_than_documented(
    kustomization: str, tmp_path: Path
) -> None:
    """Read with the agent's own configuration reader: each round of the storage test writes
    size_bytes to each path, so the default is the paths times the size."""
    path = tmp_path / "config.yaml"
    path.write_text(shipped_config(kustomization))
    storage = load_config(str(path), sections()).section(STORAGE, StorageConfig)
    assert len(storage.paths) * storage.size_bytes <= DOCUMENTED_DEFAULT_STORAGE_BYTES
    assert "opt-in" in shipped_config(kustomization)  # and the file says so


def test_the_documented_opt_in_is_a_valid_configuration(tmp_path: Path) -> None:
    """The commented example in the shipped file loads, sized as it says (256 MiB)."""
    text = shipped_config("base")
    example = "\n".join(
        line.replace("#   ", "  ", 1) for line in text.splitlines() if line.startswith("  #   ")
    )
    path = tmp_path / "config.yaml"
    path.write_text(f"storage:\n{example}\n")
    storage = load_config(str(path), sections()).section(STORAGE, StorageConfig)
    assert storage.paths == ("/var/lib/gpuprobe/scratch",)
    assert storage.size_bytes == 256 * 1024 * 1024


def test_every_secret_the_pod_mounts_is_optional_or_part_of_the_install() -> None:
    """No Secret to make by hand before the pods can start (the TLS overlay's certificate is
    the one the operator chose to add)."""
    for kustomization in AGENT_INSTALLS:
        shipped = {d["metadata"]["name"] for d in objects(kustomization) if d["kind"] == "Secret"}
        for volume in pod_spec(kustomization)["volumes"]:
            secret = volume.get("secret")
            if secret is None or (kustomization == "overlays/tls" and volume["name"] == "tls"):
                continue
            assert secret.get("optional") is True or secret["secretName"] in shipped, volume


def test_the_install_works_before_the_token_secret_exists(tmp_path: Path) -> None:
    """`gpuprobe serve` with the DaemonSet's arguments (container paths mapped onto this
    machine; loopback and a snapshot for --root and the listen addresses) and the token
    Secret's mount empty, as the kubelet leaves an optional Secret that does not exist: the
    agent starts, becomes live and ready, serves its report, and keeps the guarded RPCs
    closed to everyone until the Secret is created."""
    container = pod_spec("base")["containers"][0]
    token_mount = tmp_path / "token"
    token_mount.mkdir()  # the kubelet's empty directory
    config = yaml.safe_load(shipped_config("base"))
    for section in ("xid", "workloads"):
        config[section]["state_dir"] = str(tmp_path / "state")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    on_this_machine = {
        "/etc/gpuprobe/token/token": str(token_mount / "token"),
        "/etc/gpuprobe/config/config.yaml": str(tmp_path / "config.yaml"),
    }
    args = []
    for arg in container["args"][1:]:
        flag, _, value = arg.partition("=")
        if flag in ("--grpc-listen", "--metrics-listen", "--root"):
            continue
        args.append(f"{flag}={on_this_machine[value]}")
    assert [a.split("=")[0] for a in args] == ["--token-file", "--config"]
    with serve_process(*args, "--snapshot", snapshot("synthetic-h100-8gpu-healthy")) as agent:
        assert agent.logs[-1]["token_pending"] is True
        assert agent.get(container["livenessProbe"]["httpGet"]["path"])[0] == 200
        with Client(agent.grpc_target, token="guess") as client:
            wait_for(lambda: client.health("gpuprobe.v1.NodeDiagnostics") == "SERVING")
            assert client.get_report().status.value == "OK"
            with pytest.raises(grpc.RpcError) as err:
                client.run_checks(["driver"])
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        (token_mount / "token").write_text("created-later")  # kubectl create secret ...
        with Client(agent.grpc_target, token="created-later") as client:
            assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]
