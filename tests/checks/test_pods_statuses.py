"""Check `pods` reading the node's pods as the API server reports them: each status signature
on the real-shaped pods of `tests/fixtures/pods/gpu-node-17.json`, near-misses that match
nothing, one finding per pod and cause from its log and its status, the API's refusal as a
fact, and the capture of the answer replayed the same.

The statuses' texts are the ones published: the kubelet's admission rejection
(pkg/kubelet/kubelet.go rejectPod, "Pod was rejected: " + pkg/kubelet/cm/admission's
"Allocate failed due to %v, which is unexpected", the device manager's "requested number of
devices unavailable for %s. Requested: %d, Available: %d"; kubernetes/kubernetes#97131 for an
older kubelet's "Pod Allocate failed due to device plugin GetPreferredAllocation rpc failed"),
containerd's CDI injection error (kubernetes-sigs/dra-driver-nvidia-gpu#736), runc's prestart
hook error with nvidia-container-cli's requirement error (NVIDIA/k8s-device-plugin#1400,
SyneRBI/PETRIC2#27), the CPU manager's "not enough cpus available to satisfy request".
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, gpuprobe, snapshot
from gpuprobe.capture import prepare_target, write_snapshot
from gpuprobe.checks import pods
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.errors import SnapshotError
from gpuprobe.host import Host, recording_host, snapshot_host
from gpuprobe.host.nvml import RecordingNvml, ReplayNvml, load_record
from gpuprobe.host.podstatus import (
    MAX_PODS,
    PodStatusAnswer,
    ReplayedPodStatuses,
    answer_from_json,
    failed,
    pod_from_api,
)
from gpuprobe.pipeline import run_checks
from gpuprobe.report import CheckResult, PodRef
from gpuprobe.report import gpu_resource as _gpu
from helpers import codes
from kubelet_standin import kubelet, state_from_json

SNAPSHOT = "synthetic-pods-cuda12.8-geforce-550"  # ml-team/llama-finetune-0 holds GPU 0
FIXTURE = ROOT / "tests/fixtures/pods/gpu-node-17.json"
GPU0 = _gpu(0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000")
FORBIDDEN = (
    'pods is forbidden: User "system:serviceaccount:gpuprobe:gpuprobe" cannot list resource '
    '"pods" in API group "" at the cluster scope'
)


def fixture_pods() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["items"]
    return items


def listed() -> PodStatusAnswer:
    return PodStatusAnswer(tuple(pod_from_api(p) for p in fixture_pods()))


def run(answer: PodStatusAnswer) -> CheckResult:
    host = snapshot_host(snapshot(SNAPSHOT))
    host.pod_statuses = ReplayedPodStatuses(answer)
    return pods.run(CheckContext(host), Config())


def by_pod(result: CheckResult) -> dict[str, list[tuple[str, str | None, str | None]]]:
    found: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for f in result.data["failures"]:
        found.setdefault(f["pod"], []).append((f["cause"], f.get("status"), f.get("reason")))
    return found


def test_each_status_signature_and_the_near_misses() -> None:
    result = run(listed())
    assert by_pod(result) == {
        "llama-finetune-0": [
            ("cuda-driver-too-old", None, None),  # its log
            ("cuda-driver-too-old", "lastState.terminated", "Error"),  # its termination message
        ],
        "llama-finetune-1": [
            ("device-plugin-allocation-failed", "status", "UnexpectedAdmissionError")
        ],
        "llama-finetune-2": [
            ("device-plugin-allocation-failed", "status", "UnexpectedAdmissionError")
        ],
        "detector-0": [("cdi-device-unresolvable", "state.waiting", "CreateContainerError")],
        "jax-nightly-0": [
            ("runtime-requirement-unsatisfied", "lastState.terminated", "StartError")
        ],
    }  # no finding for the CPU manager's rejections (of a CPU pod and of a GPU pod), for a
    # CPU pod's CUDA probe, nor for a GPU pod's own exit
    assert codes(result) == sorted(
        [
            ("IMAGE_CUDA_TOO_NEW", "CRITICAL", "FIX_CONFIG", GPU0),
            ("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", GPU0),
            ("CDI_SPEC_STALE", "CRITICAL", "FIX_CONFIG", "node"),
        ]
        + [("POD_GPU_FAILURE", "WARNING", "FIX_CONFIG", "node")] * 4
    )
    details = {f["pod"]: f["detail"] for f in result.data["failures"] if f.get("status")}
    assert details == {
        "llama-finetune-0": "12040",
        "llama-finetune-1": (
            "requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0"
        ),
        "llama-finetune-2": (
            "device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Unknown "
            "desc = Unable to retrieve list of available devices: error creating nvml.Device 5: "
            "nvml: GPU is lost"
        ),
        "detector-0": "nvidia.com/gpu=GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000",
        "jax-nightly-0": "cuda>=12.8",
    }
    rejected = next(
        f for f in result.findings if f.pods == (PodRef("ml-team", "llama-finetune-1"),)
    )
    assert rejected.message == (
        "pod ml-team/llama-finetune-1 failed: the kubelet could not allocate the pod's GPUs from "
        'the device plugin; its status (UnexpectedAdmissionError) says "Pod was rejected: '
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
        "Requested: 1, Available: 0, which is unexpected\". Fix: check the device plugin's log "
        "and health (an unhealthy or lost GPU, a plugin restart); restarting the kubelet clears "
        "stale allocations"
    )
    start = next(f for f in result.data["failures"] if f["pod"] == "jax-nightly-0")
    assert start["time"] == "2026-11-29T20:47:31Z" and start["file"] is None
    assert "\n" not in start["line"]  # the hook's stderr lines, joined
    assert result.data["api"] == {"pods_read": 9, "truncated": False}
    assert result.summary == (
        "1 GPU container(s); 1 need a newer driver; 5 pod(s) failed for GPU reasons"
    )


def test_a_cause_in_the_log_and_the_status_is_one_finding_with_both() -> None:
    result = run(listed())
    (finding,) = [f for f in result.findings if f.code == "POD_GPU_FAILURE" and f.resource == GPU0]
    assert finding.pods == (PodRef("ml-team", "llama-finetune-0", "trainer"),)
    assert finding.message.startswith(
        "pod ml-team/llama-finetune-0 failed: the driver is older than the CUDA runtime in the "
        'image; container trainer logged "RuntimeError: The NVIDIA driver on your system is too '
        "old (found version 12040)."
    )
    assert "; container trainer's lastState.terminated (Error) says \"…" in finding.message


def test_statuses_alone_and_no_api_at_all() -> None:
    """Without the log, the status alone still finds the cause; without API access the check is
    as it was (no `api` in its data)."""
    alone = run(PodStatusAnswer((pod_from_api(fixture_pods()[0]),)))
    assert by_pod(alone)["llama-finetune-0"][1][1] == "lastState.terminated"
    absent = run(PodStatusAnswer(absent=True))
    assert "api" not in absent.data
    assert by_pod(absent) == {"llama-finetune-0": [("cuda-driver-too-old", None, None)]}
    assert absent.summary == alone.summary


def test_the_api_refusing_is_a_fact_in_the_data_not_a_finding() -> None:
    result = run(failed("403", FORBIDDEN))
    assert result.data["api"] == {"error": {"code": "403", "message": FORBIDDEN}}
    assert codes(result) == codes(run(PodStatusAnswer(absent=True)))
    assert result.summary.endswith("; pod statuses not read (API 403)")


def test_the_answer_is_captured_and_replayed_the_same(short_tmp: Path) -> None:
    source = Path(snapshot(SNAPSHOT))
    root = short_tmp / "host"
    shutil.copytree(source / "rootfs", root)
    recorded = json.loads((source / "podresources.json").read_text())
    for answer, name in ((listed(), "listed"), (failed("403", FORBIDDEN), "refused")):
        target = short_tmp / name
        with kubelet(root, state_from_json(recorded)):
            host = recording_host(str(root), "gpu-node-17", ReplayedPodStatuses(answer))
            host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
            live = run_checks(host, Config(), ["pods"])
            write_snapshot(prepare_target(target), host, live)
        kept = json.loads((target / "pod-statuses.json").read_text())
        assert answer_from_json(kept) == answer
        replay = run_checks(snapshot_host(str(target)), Config(), ["pods"])
        assert replay.checks[0].data == live.checks[0].data
        assert replay.checks[0].findings == live.checks[0].findings
    without = short_tmp / "without"
    with kubelet(root, state_from_json(recorded)):
        host = recording_host(str(root), "gpu-node-17")
        host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
        write_snapshot(prepare_target(without), host, run_checks(host, Config(), ["pods"]))
    assert not (without / "pod-statuses.json").exists()  # no API access: no file


def test_the_command_replays_a_snapshots_pod_statuses(tmp_path: Path) -> None:
    copy = tmp_path / "snap"
    shutil.copytree(snapshot(SNAPSHOT), copy)
    (copy / "pod-statuses.json").write_text(json.dumps(listed().to_json()))
    done = gpuprobe("check", "--snapshot", str(copy), "--only", "pods", "--json")
    (check,) = json.loads(done.stdout)["checks"]
    assert check["data"]["api"] == {"pods_read": 9, "truncated": False}
    assert len(check["findings"]) == 7
    (copy / "pod-statuses.json").write_text('{"pods": [{"name": 1}], "truncated": false}')
    bad = gpuprobe("check", "--snapshot", str(copy), "--only", "pods")
    assert bad.returncode == 64 and bad.stderr.startswith("gpuprobe: ")
    assert "pod-statuses.json: pods[0]" in bad.stderr and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ([], "not a JSON object"),
        ({"pods": []}, 'needs "pods" and "truncated"'),
        ({"error": "403"}, '"error" must be'),
        ({"pods": [{}] * (MAX_PODS + 1), "truncated": True}, "at most 500"),
        (
            {
                "pods": [{"namespace": "a", "name": "b", "uid": "c", "containers": [{}]}],
                "truncated": False,
            },
            "containers[0]: a container needs exactly",
        ),
        (
            {
                "pods": [
                    {
                        "namespace": "a",
                        "name": "b",
                        "uid": "c",
                        "containers": [
                            {
                                "name": "x",
                                "init": False,
                                "gpuResources": [],
                                "restartCount": 0,
                                "state": {"running": {}},
                                "lastState": {},
                            }
                        ],
                    }
                ],
                "truncated": False,
            },
            '"state.running" must be {"startedAt": a string}',
        ),
    ],
)
def test_a_bad_pod_statuses_file_is_a_snapshot_error(content: Any, problem: str) -> None:
    with pytest.raises(SnapshotError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        answer_from_json(content)


def test_the_host_asks_for_its_own_node() -> None:
    asked: list[str] = []

    class Source:
        def ask(self, node: str) -> PodStatusAnswer:
            asked.append(node)
            return PodStatusAnswer()

    host: Host = snapshot_host(snapshot(SNAPSHOT), "gpu-node-17")
    host.pod_statuses = Source()
    pods.run(CheckContext(host), Config())
    assert asked == ["gpu-node-17"]


def test_a_cuda_fault_in_a_termination_message_counts_at_an_xid_only() -> None:
    """PyTorch's error as FallbackToLogsOnError keeps it: at the time of the XID 48 the
    kernel logged on the container's GPU it is that XID's; hours later it is the app's own."""

    def crashed(name: str, uid: str, finished: str) -> dict[str, Any]:
        pod = fixture_pods()[0]
        pod["metadata"].update(name=name, uid=uid)
        last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
        last["message"] = (
            "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
        )
        last["finishedAt"] = finished
        return pod

    answer = PodStatusAnswer(
        tuple(
            pod_from_api(p)
            for p in (
                crashed("llama-pretrain-3", "7c1e003f-2d4b-4a8e-9f3c-00000000003f",
                        "2026-11-29T20:41:10Z"),
                crashed("llama-pretrain-4", "7c1e0040-2d4b-4a8e-9f3c-000000000040",
                        "2026-11-29T23:41:10Z"),
            )
        )
    )  # fmt: skip
    host = snapshot_host(snapshot("synthetic-pods-log-signatures"))
    host.pod_statuses = ReplayedPodStatuses(answer)
    result = pods.run(CheckContext(host), Config())
    at_xid = [f for f in result.data["failures"] if f["cause"] == "cuda-fault-at-xid"]
    assert [(f["pod"], f.get("status"), f["xid"]) for f in at_xid] == [
        ("llama-pretrain-3", None, 48),
        ("llama-pretrain-3", "lastState.terminated", 48),
    ]  # llama-pretrain-4's fault, hours after any XID, is its own
    (finding,) = [f for f in result.findings if "llama-pretrain-3" in f.message]
    assert "(XID 48)" in finding.message and "lastState.terminated (Error) says" in finding.message


def test_a_plain_check_with_kubernetes_on_and_no_credentials(tmp_path: Path) -> None:
    """`kubernetes.enabled: true` means "no access is a usage error" (docs/configuration.md):
    `check` on a machine with no credentials exits 64 naming the ways out (it exited 3, the
    pods check reading the disk alone); without the pods check it needs no access."""
    config = tmp_path / "gpuprobe.yaml"
    config.write_text("kubernetes:\n  enabled: true\n")
    args = ["--root", str(tmp_path), "--config", str(config), "--json"]
    done = gpuprobe("check", *args, "--only", "pods")
    assert (done.returncode, done.stdout) == (64, "")
    assert done.stderr == (
        "gpuprobe: kubernetes.enabled is true and there is no access (kubernetes: no "
        "in-cluster credentials (/var/run/secrets/kubernetes.io/serviceaccount/token and "
        "$KUBERNETES_SERVICE_HOST); give --kubeconfig): run in a pod, add --publish "
        "--kubeconfig FILE, or set kubernetes.enabled: auto (see gpuprobe check --help)\n"
    )
    driver = gpuprobe("check", *args, "--only", "driver")
    assert driver.returncode != 64, driver.stderr
    assert [c["name"] for c in json.loads(driver.stdout)["checks"]] == ["driver"]


def test_a_running_containers_last_failure_is_the_pods_not_the_nodes() -> None:
    """A container that could not start for an unresolvable CDI device and runs now (the
    spec was regenerated): its pod's failure stays, with its status, but the node's
    CDI_SPEC_STALE (CRITICAL) does not; waiting on the same error, the node's is raised."""
    pod = copy.deepcopy(fixture_pods()[3])
    status = pod["status"]["containerStatuses"][0]
    failing = run(PodStatusAnswer((pod_from_api(copy.deepcopy(pod)),)))
    status["lastState"] = {"terminated": {**status["state"]["waiting"], "exitCode": 128}}
    status["state"] = {"running": {"startedAt": "2026-11-29T21:02:11Z"}}
    recovered = run(PodStatusAnswer((pod_from_api(pod),)))
    assert by_pod(recovered)["detector-0"] == [
        ("cdi-device-unresolvable", "lastState.terminated", "CreateContainerError")
    ]
    assert ("CDI_SPEC_STALE", "CRITICAL", "FIX_CONFIG", "node") in codes(failing)
    assert "CDI_SPEC_STALE" not in {c[0] for c in codes(recovered)}
    recorded = answer_from_json(PodStatusAnswer((pod_from_api(pod),)).to_json())
    assert recorded.pods[0].containers[0].running_since == "2026-11-29T21:02:11Z"


def test_the_hooks_lower_case_cuda_error_in_a_start_error_is_found() -> None:
    """The NVIDIA hook prints CUDA's words in lower case inside the kubelet's StartError
    message: matched regardless of case (it matched nothing)."""
    pod = copy.deepcopy(fixture_pods()[4])  # research/jax-nightly-0, one GPU, StartError
    terminated = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    terminated["message"] = terminated["message"].replace(
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
        "update your driver to a newer version, or use an earlier cuda container: unknown",
        "nvidia-container-cli: initialization error: cuda error: no cuda-capable device is "
        "detected: unknown",
    )
    result = run(PodStatusAnswer((pod_from_api(pod),)))
    assert by_pod(result)["jax-nightly-0"] == [
        ("no-cuda-device", "lastState.terminated", "StartError")
    ]
    pod_finding, node_finding = [f for f in result.findings if "jax-nightly-0" in f.message]
    assert (pod_finding.code, pod_finding.action.value) == ("POD_GPU_FAILURE", "FIX_CONFIG")
    assert "cuda error: no cuda-capable device is detected" in pod_finding.message
    # The hook failed at initialization: no GPU container can start on the node.
    assert (node_finding.severity.value, node_finding.resource) == ("CRITICAL", "node")
