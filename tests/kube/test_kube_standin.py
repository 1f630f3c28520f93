"""The API stand-in refuses what the API server refuses, so tests against it mean something."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_standin import MERGE, STRATEGIC, KubeStandIn, running

NODE = "gpu-node-17"


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def call(
    standin: KubeStandIn,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    token: str | None = "agent-token",
) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=standin.pki.ca)
    request = urllib.request.Request(
        f"https://127.0.0.1:{standin.port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Content-Type": content_type,
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


STATUS = f"/api/v1/nodes/{NODE}/status"


def test_authentication_and_authorization(standin: KubeStandIn) -> None:
    assert call(standin, "GET", f"/api/v1/nodes/{NODE}", token=None)[0] == 401
    assert call(standin, "GET", f"/api/v1/nodes/{NODE}", token="stolen")[0] == 401
    code, status = call(standin, "DELETE", f"/api/v1/nodes/{NODE}")
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        f'nodes "{NODE}" is forbidden: User "system:serviceaccount:gpuprobe:gpuprobe" cannot '
        'delete resource "nodes" in API group "" at the cluster scope'
    )
    assert call(standin, "GET", "/api/v1/namespaces/default/pods/x")[0] == 403  # list only
    assert call(standin, "DELETE", "/api/v1/namespaces/default/pods/x")[0] == 403
    assert call(standin, "POST", "/api/v1/namespaces/default/events", {})[0] == 403  # core events
    # pods/eviction is granted (remediation.evict_pods): past RBAC, the base stand-in does
    # not serve it (tests/kube_dra.py does); any other pod subresource is not granted.
    assert call(standin, "POST", "/api/v1/namespaces/default/pods/x/eviction", {})[0] == 404
    assert call(standin, "POST", "/api/v1/namespaces/default/pods/x/binding", {})[0] == 403
    assert call(standin, "GET", "/apis/events.k8s.io/v1/namespaces/default/events/x")[0] == 403


def condition(**extra: Any) -> dict[str, Any]:
    return {"type": "GPUHardwareReady", "status": "True", "reason": "AllChecksPassed", **extra}


def test_bodies_are_held_to_the_published_schemas(standin: KubeStandIn) -> None:
    code, status = call(
        standin,
        "PATCH",
        STATUS,
        {"status": {"conditions": [condition(severity="high")]}},
        STRATEGIC,
    )
    assert (code, status["reason"]) == (422, "Invalid")  # an unknown field
    assert (
        call(
            standin,
            "PATCH",
            STATUS,
            {"status": {"conditions": [condition(status=True)]}},
            STRATEGIC,
        )[0]
        == 422
    )
    assert (
        call(standin, "PATCH", STATUS, {"status": {"conditions": [{"status": "True"}]}}, STRATEGIC)[
            0
        ]
        == 422
    )
    assert call(standin, "PATCH", STATUS, {"status": {}}, "application/json")[0] == 415
    node = f"/api/v1/nodes/{NODE}"
    for taint in (
        {"key": "gpuprobe.io/unhealthy", "value": "XID", "effect": "NoEvict"},
        {"key": "gpuprobe.io/unhealthy", "value": "GPU LOST", "effect": "NoSchedule"},
        {"key": "bad key", "effect": "NoSchedule"},
    ):
        assert call(standin, "PATCH", node, {"spec": {"taints": [taint]}}, MERGE)[0] == 422


def test_conditions_merge_by_type_and_taints_replace_whole(standin: KubeStandIn) -> None:
    assert (
        call(standin, "PATCH", STATUS, {"status": {"conditions": [condition()]}}, STRATEGIC)[0]
        == 200
    )
    assert sorted(standin.conditions(NODE)) == ["GPUHardwareReady", "Ready"]
    # a merge patch replaces the list: the kubelet's Ready would be gone
    assert (
        call(standin, "PATCH", STATUS, {"status": {"conditions": [condition()]}}, MERGE)[0] == 200
    )
    assert sorted(standin.conditions(NODE)) == ["GPUHardwareReady"]
    one = {"key": "a", "effect": "NoSchedule"}
    two = {"key": "b", "effect": "NoSchedule"}
    call(standin, "PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"taints": [one]}}, STRATEGIC)
    call(standin, "PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"taints": [two]}}, STRATEGIC)
    assert standin.taints(NODE) == [two]  # NodeSpec.Taints has no patch strategy


def test_subresources_write_only_their_part_and_stale_versions_conflict(
    standin: KubeStandIn,
) -> None:
    call(standin, "PATCH", STATUS, {"spec": {"unschedulable": True}}, STRATEGIC)
    call(standin, "PATCH", f"/api/v1/nodes/{NODE}", {"status": {"conditions": []}}, MERGE)
    node = standin.nodes[NODE]
    assert "unschedulable" not in node["spec"] and "Ready" in standin.conditions(NODE)
    version = node["metadata"]["resourceVersion"]
    standin.touch(NODE)
    code, status = call(
        standin,
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        {"metadata": {"resourceVersion": version}, "spec": {"taints": []}},
        MERGE,
    )
    assert (code, status["reason"]) == (409, "Conflict")


def event(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{NODE}.gpuprobe.0123456789abcdef", "namespace": "default"},
        "eventTime": "2026-12-01T21:00:00.000000Z",
        "reportingController": "gpuprobe.io/agent",
        "reportingInstance": f"gpuprobe-{NODE}",
        "action": "Detected",
        "reason": "GpuLost",
        "type": "Warning",
        "note": "GPU 5 is lost",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        **extra,
    }


EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


def test_events_follow_the_events_api_rules(standin: KubeStandIn) -> None:
    code, status = call(standin, "POST", EVENTS, event(eventTime="2026-12-01T21:00:00Z"))
    assert (code, status["reason"]) == (400, "BadRequest")  # MicroTime needs its 6 digits
    assert call(standin, "POST", EVENTS, event(type="Error"))[0] == 422
    assert call(standin, "POST", EVENTS, event(note="x" * 1025))[0] == 422
    assert call(standin, "POST", EVENTS, event(reportingController=""))[0] == 422
    assert (
        call(standin, "POST", EVENTS, event(metadata={"name": "Bad_Name", "namespace": "default"}))[
            0
        ]
        == 422
    )
    assert (
        call(
            standin,
            "POST",
            "/apis/events.k8s.io/v1/namespaces/gpuprobe/events",
            event(metadata={"name": "n.x", "namespace": "gpuprobe"}),
        )[0]
        == 422
    )
    assert call(standin, "POST", EVENTS, event())[0] == 201
    assert call(standin, "POST", EVENTS, event())[0] == 409  # AlreadyExists
    name = f"{EVENTS}/{NODE}.gpuprobe.0123456789abcdef"
    series = {"series": {"count": 2, "lastObservedTime": "2026-12-01T21:01:00.000000Z"}}
    assert call(standin, "PATCH", name, series, MERGE)[0] == 200
    assert call(standin, "PATCH", name, {"note": "another"}, MERGE)[0] == 422  # immutable
    assert call(standin, "PATCH", name, {"series": {"count": 1}}, MERGE)[0] == 422
