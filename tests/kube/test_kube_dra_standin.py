"""The stand-in's resource.k8s.io and Eviction API are as strict as the API server's: the
schemas and validation of DeviceTaintRules and ResourceSlices, discovery per release, the
eviction registry's answers (the 429's Status body), and the RBAC the manifests grant."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_dra import PDB_MESSAGE, DraStandIn, nvidia_slice
from kube_standin import ApiFailure, manifest_rules

NODE = "gpu-node-17"
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"


def call(
    standin: DraStandIn, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    context = ssl.create_default_context(cafile=standin.pki.ca)
    request = urllib.request.Request(
        f"https://127.0.0.1:{standin.port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": "Bearer agent-token", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[DraStandIn]:
    s = DraStandIn(tmp_path, manifest_rules())
    s.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    s.add_slice(
        nvidia_slice(NODE, [(0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000", "0000:18:00.0")])
    )
    s.start()
    try:
        yield s
    finally:
        s.stop()


def rule(**taint: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r1"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
            "taint": {
                "key": "gpuprobe.io/unhealthy",
                "value": "GPU_LOST",
                "effect": "NoSchedule",
                **taint,
            },
        },
    }


def test_device_taint_rules_are_validated_as_the_api_server_does(standin: DraStandIn) -> None:
    code, status, _ = call(standin, "POST", RULES, rule(effect="PreferNoSchedule"))
    assert (code, status["reason"]) == (422, "Invalid")
    assert "spec.taint.effect: Unsupported value: 'PreferNoSchedule'" in status["message"]
    bad_device = rule()
    bad_device["spec"]["deviceSelector"]["device"] = "GPU_0"
    assert call(standin, "POST", RULES, bad_device)[0] == 422
    unknown = rule()
    unknown["spec"]["taint"]["colour"] = "red"  # strict schema: unknown fields are errors
    assert call(standin, "POST", RULES, unknown)[0] == 422
    code, made, _ = call(standin, "POST", RULES, rule())
    assert code == 201 and made["spec"]["taint"]["timeAdded"]
    assert call(standin, "POST", RULES, rule())[1]["reason"] == "AlreadyExists"
    code, listed, _ = call(standin, "GET", RULES)
    assert (code, listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == (
        200,
        "DeviceTaintRuleList",
        ["r1"],
    )
    assert call(standin, "DELETE", f"{RULES}/r1")[0] == 200
    assert call(standin, "DELETE", f"{RULES}/r1")[0] == 404
    # The agent may not update, patch or get one (create, delete, list only).
    assert call(standin, "PATCH", f"{RULES}/r1", {})[0] == 403
    assert call(standin, "GET", f"{RULES}/r1")[0] == 403


def test_slices_are_validated_and_listed_by_their_selectable_fields(standin: DraStandIn) -> None:
    twice = nvidia_slice(
        "gpu-node-18", [(0, "GPU-a", "0000:18:00.0"), (0, "GPU-b", "0000:19:00.0")]
    )
    with pytest.raises(ApiFailure, match="Duplicate value"):
        standin.add_slice(twice)
    listed = call(
        standin,
        "GET",
        f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{NODE}",
    )[1]
    assert [s["spec"]["nodeName"] for s in listed["items"]] == [NODE]
    assert (
        call(standin, "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.pool%3Dx")[
            0
        ]
        == 400
    )
    assert call(standin, "POST", "/apis/resource.k8s.io/v1/resourceslices", {})[0] == 403


def test_discovery_lists_device_taint_rules_where_the_release_serves_them(tmp_path: Path) -> None:
    for release, gate, v1, v1beta2 in [
        ("1.37", True, True, True),
        ("1.36", True, False, True),
        ("1.36", False, False, False),
    ]:
        standin = DraStandIn(tmp_path, manifest_rules(), release, device_taint_rules=gate)
        standin.start()
        try:
            names = {
                v: [
                    r["name"]
                    for r in call(standin, "GET", f"/apis/resource.k8s.io/{v}")[1]["resources"]
                ]
                for v in ("v1", "v1beta2")
            }
            assert ("devicetaintrules" in names["v1"], "devicetaintrules" in names["v1beta2"]) == (
                v1,
                v1beta2,
            )
            if not v1:
                assert call(standin, "GET", RULES)[0] == 404
        finally:
            standin.stop()


def test_the_eviction_registrys_answers(standin: DraStandIn) -> None:
    pod = json.loads((Path(__file__).parents[1] / "fixtures/pods/gpu-node-17.json").read_text())[
        "items"
    ][0]
    pod["metadata"]["labels"] = {"app": "llama"}
    standin.add_pod(pod)
    path = "/api/v1/namespaces/ml-team/pods/llama-finetune-0/eviction"
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "llama-finetune-0"}}
    wrong = {**body, "metadata": {"name": "another"}}
    assert call(standin, "POST", path, wrong)[1]["message"] == (
        "name in URL does not match name in Eviction object"
    )
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llama", "namespace": "ml-team"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "llama"}}},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": 0,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
        },
    }
    standin.add_pdb(budget)
    code, status, headers = call(standin, "POST", path, body)
    assert code == 429 and "Retry-After" not in headers
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": PDB_MESSAGE,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget llama needs 1 healthy pods and has 1 "
                    "currently",
                }
            ]
        },
        "code": 429,
    }
    standin.add_pdb({**budget, "metadata": {"name": "second", "namespace": "ml-team"}})
    assert call(standin, "POST", path, body)[0] == 500  # two budgets: the registry refuses
    del standin.pdbs[("ml-team", "second")]
    standin.pdbs[("ml-team", "llama")]["status"]["disruptionsAllowed"] = 1
    assert call(standin, "POST", path, body)[:2] == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"},
    )
    assert standin.pdbs[("ml-team", "llama")]["status"]["disruptionsAllowed"] == 0
    assert ("ml-team", "llama-finetune-0") not in standin.pods
    # Deleting a pod is never granted: only the Eviction API.
    assert call(standin, "DELETE", "/api/v1/namespaces/ml-team/pods/x")[0] == 403
