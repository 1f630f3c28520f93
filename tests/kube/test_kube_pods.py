"""The node's pods from the API server: the real client library (lightkube) against the strict
stand-in, which serves the pods of `tests/fixtures/pods/gpu-node-17.json` (as `kubectl get pods
-A --field-selector spec.nodeName=gpu-node-17 -o json` prints them) with the API server's
field selector semantics, pages and RBAC."""

from __future__ import annotations

import copy
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, gpuprobe
from gpuprobe.config import KubernetesConfig
from gpuprobe.errors import UsageError
from gpuprobe.host.podstatus import ApiProblem, State, pod_from_api
from gpuprobe.kube import api as kube_api
from gpuprobe.kube.api import Access, KubeApi
from gpuprobe.kube.pods import LivePodStatuses, pod_statuses
from kube_standin import KubeStandIn, manifest_rules, running

NODE = "gpu-node-17"
FIXTURE = ROOT / "tests/fixtures/pods/gpu-node-17.json"


def call(standin: KubeStandIn, method: str, path: str) -> tuple[int, dict[str, Any]]:
    """One request with the agent's token, as a plain HTTPS client sends it."""
    context = ssl.create_default_context(cafile=standin.pki.ca)
    request = urllib.request.Request(
        f"https://127.0.0.1:{standin.port}{path}",
        method=method,
        headers={"Authorization": "Bearer agent-token"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def fixture_pods() -> list[dict[str, Any]]:
    """The node's pods as kubectl printed them."""
    items: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["items"]
    return items


def elsewhere(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The same pod, bound to another node, under another name."""
    moved = copy.deepcopy(pod)
    moved["spec"]["nodeName"] = node
    moved["metadata"]["name"] += "-elsewhere"
    return moved


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        for pod in fixture_pods():
            stand_in.add_pod(pod)
            stand_in.add_pod(elsewhere(pod, "gpu-node-18"))
        yield stand_in


def live(standin: KubeStandIn, timeout: float = 2) -> LivePodStatuses:
    return LivePodStatuses(KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout))


def test_the_nodes_pods_are_listed_by_field_selector_and_kept_as_the_check_needs(
    standin: KubeStandIn,
) -> None:
    answer = live(standin).ask(NODE)
    assert answer.error is None and not answer.truncated and not answer.absent
    assert [(p.namespace, p.name) for p in answer.pods] == sorted(
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in fixture_pods()
    )  # no pod of gpu-node-18
    assert answer.pods == tuple(pod_from_api(p) for p in sorted(fixture_pods(), key=_key))
    (one,) = [r for r in standin.requests if r[2] == "/api/v1/pods"]
    assert one[1:] == ("GET", "/api/v1/pods", 200)
    rejected = next(p for p in answer.pods if p.name == "llama-finetune-1")
    assert (rejected.phase, rejected.reason) == ("Failed", "UnexpectedAdmissionError")
    assert rejected.message is not None and rejected.message.startswith("Pod was rejected: ")
    (trainer,) = rejected.containers
    assert (trainer.name, trainer.gpu_resources, trainer.waiting) == (
        "trainer",
        ("nvidia.com/gpu",),
        None,
    )  # its spec says what it asked for; it never got a status
    jax = next(p for p in answer.pods if p.name == "jax-nightly-0").containers[0]
    assert jax.restart_count == 4 and jax.waiting is not None
    assert jax.waiting.reason == "CrashLoopBackOff"
    assert jax.last_terminated is not None
    assert (jax.last_terminated.reason, jax.last_terminated.exit_code) == ("StartError", 128)
    assert jax.last_terminated.finished_at == "2026-11-29T20:47:31Z"
    cpu = next(p for p in answer.pods if p.name == "etl-pinned-0")
    assert not cpu.asks_for_gpus and cpu.containers[0].gpu_resources == ()


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])


def test_pages_are_followed_and_the_answer_is_bounded(
    standin: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_api, "PAGE", 4)
    answer = live(standin).ask(NODE)
    assert len(answer.pods) == 9 and not answer.truncated
    pages = [r for r in standin.requests if r[2] == "/api/v1/pods"]
    assert len(pages) == 3  # 4 + 4 + 1, each page's `continue` naming the next
    monkeypatch.setattr("gpuprobe.kube.pods.MAX_PODS", 5)
    cut = live(standin).ask(NODE)
    assert len(cut.pods) == 5 and cut.truncated
    assert len([r for r in standin.requests if r[2] == "/api/v1/pods"]) == 3 + 2


def test_without_the_rbac_grant_the_answer_is_the_403(tmp_path: Path) -> None:
    rules = [r for r in manifest_rules() if "pods" not in r.resources]
    with running(tmp_path, rules) as standin:
        answer = live(standin).ask(NODE)
    assert answer.pods == () and answer.error == ApiProblem(
        "403",
        'pods is forbidden: User "system:serviceaccount:gpuprobe:gpuprobe" cannot list '
        'resource "pods" in API group "" at the cluster scope',
    )


def test_an_unreachable_or_slow_server_is_an_answer_not_an_exception(
    standin: KubeStandIn,
) -> None:
    source = live(standin, timeout=0.5)
    standin.faults.delay = 1.5
    slow = source.ask(NODE)
    assert slow.error is not None and slow.error.code == "timeout"
    standin.faults.delay = 0
    with standin.down():
        down = source.ask(NODE)
    assert down.error is not None and down.error.code == "unreachable"
    standin.faults.answers = [500]
    failing = source.ask(NODE)
    assert failing.error == ApiProblem("500", "forced 500")


def test_the_source_is_there_only_when_kubernetes_is_on(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    assert pod_statuses(KubernetesConfig(enabled=False), str(standin.kubeconfig())) is None
    assert pod_statuses(KubernetesConfig(), None) is None  # auto, no in-cluster credentials
    on = pod_statuses(KubernetesConfig(), str(standin.kubeconfig()))
    assert isinstance(on, LivePodStatuses) and len(on.ask(NODE).pods) == 9
    with pytest.raises(UsageError, match="no in-cluster credentials"):
        pod_statuses(KubernetesConfig(enabled=True), None)
    broken = tmp_path / "broken-kubeconfig"
    broken.write_text("clusters: [oops\n")
    with pytest.raises(UsageError, match="kubernetes access"):
        pod_statuses(KubernetesConfig(), str(broken))


def test_the_standin_refuses_field_selectors_the_api_server_refuses(standin: KubeStandIn) -> None:
    code, status = call(standin, "GET", "/api/v1/pods?fieldSelector=status.hostIP%3D10.0.3.17")
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Unable to find "/v1, Resource=pods" that match label selector "", field selector '
        '"status.hostIP=10.0.3.17": field label not supported: status.hostIP'
    )
    code, listed = call(
        standin,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-17,status.phase!%3DRunning",
    )
    assert code == 200 and (listed["kind"], listed["apiVersion"]) == ("PodList", "v1")
    assert listed["metadata"]["resourceVersion"].isdecimal()
    assert "kind" not in listed["items"][0]  # a list's items carry neither kind nor apiVersion
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == [
        "detector-0",
        "etl-pinned-0",
        "llama-eval-0",
        "llama-finetune-1",
        "llama-finetune-2",
    ]
    code, ns = call(standin, "GET", "/api/v1/namespaces/vision/pods")
    assert code == 200 and [p["spec"]["nodeName"] for p in ns["items"]] == [NODE, "gpu-node-18"]
    code, status = call(standin, "GET", "/api/v1/pods?limit=2&continue=bm90LWEtdG9rZW4")
    assert (code, status["reason"]) == (400, "BadRequest")
    code, status = call(standin, "GET", "/api/v1/namespaces/vision/pods/detector-0")
    assert code == 403  # get is not granted: the agent only lists


def test_the_standin_validates_the_pods_it_is_given(standin: KubeStandIn) -> None:
    pod = copy.deepcopy(fixture_pods()[0])
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "yesterday"}}
    with pytest.raises(Exception, match="parsing time"):
        standin.add_pod(pod)
    pod = copy.deepcopy(fixture_pods()[0])
    pod["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(Exception, match="Pod is invalid"):
        standin.add_pod(pod)


def test_messages_and_containers_are_bounded() -> None:
    pod = copy.deepcopy(fixture_pods()[4])  # the StartError
    terminated = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    terminated["message"] = "head " + "x" * 20000 + " nvidia-container-cli: requirement error"
    pod["spec"]["containers"] *= 80
    kept = pod_from_api(pod)
    last = kept.containers[0].last_terminated
    assert isinstance(last, State) and last.message is not None
    assert len(last.message) <= 4096
    assert last.message.startswith("head x") and last.message.endswith("requirement error")
    assert len(kept.containers) == 64


def test_check_lists_the_nodes_pods_through_the_kubeconfig(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    """The command's live host gets its pods from the API server (`--publish --kubeconfig`):
    the rejected pods show up in the `pods` check of a node whose disk holds nothing."""
    root = tmp_path / "root"
    root.mkdir()
    kube = ("--publish", "--kubeconfig", str(standin.kubeconfig()))
    done = gpuprobe(
        "check", "--root", str(root), "--node-name", NODE, "--only", "pods", "--json", *kube
    )
    (check,) = json.loads(done.stdout)["checks"]
    assert check["data"]["api"] == {"pods_read": 9, "truncated": False}
    assert sorted(f["pod"] for f in check["data"]["failures"]) == [
        "detector-0",
        "jax-nightly-0",
        "llama-finetune-0",
        "llama-finetune-1",
        "llama-finetune-2",
    ]
    listed = [r for r in standin.requests if r[2] == "/api/v1/pods"]
    assert [r[3] for r in listed] == [200]
