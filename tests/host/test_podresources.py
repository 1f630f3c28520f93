"""The PodResources reader against a kubelet stand-in serving the real v1 API on a unix
socket: answers, a hung kubelet (the deadline), a refusing or absent one, an old one
without GetAllocatableResources, the kubelet's rate limit; and podresources.json."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from conftest import snapshot
from gpuprobe.errors import SnapshotError
from gpuprobe.host.fs import HostFS
from gpuprobe.host.podresources import (
    DEFAULT_SOCKET,
    LivePodResources,
    PodResourcesAnswer,
    answer_from_json,
    load_podresources,
)
from kubelet_standin import dead_kubelet, kubelet, state_from_json


def recorded(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((Path(snapshot(name)) / "podresources.json").read_text())


def test_list_and_allocatable_come_back_as_the_kubelet_sent_them(short_tmp: Path) -> None:
    content = recorded("synthetic-k8s-mig-mixed")
    with kubelet(short_tmp, state_from_json(content)) as state:
        answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 2.0)
    assert state.calls == ["List", "GetAllocatableResources"]
    assert answer.error is None and not answer.absent
    assert answer.to_json() == content
    assert answer == answer_from_json(content)


def test_a_hung_kubelet_costs_the_deadline_and_reads_deadline_exceeded(short_tmp: Path) -> None:
    state = state_from_json(recorded("synthetic-k8s-gpus-by-uuid"))
    state.hang = threading.Event()
    with kubelet(short_tmp, state):
        started = time.monotonic()
        answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 0.3)
        took = time.monotonic() - started
    assert answer == PodResourcesAnswer(error="DEADLINE_EXCEEDED")
    assert 0.3 <= took < 1.5
    assert answer.to_json() == {"error": "DEADLINE_EXCEEDED"}


def test_a_socket_nobody_listens_on_is_unavailable(short_tmp: Path) -> None:
    with dead_kubelet(short_tmp):
        answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 1.0)
    assert answer == PodResourcesAnswer(error="UNAVAILABLE")


def test_no_socket_is_absent_and_asks_nothing(short_tmp: Path) -> None:
    answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 1.0)
    assert answer.absent and answer.list is None


def test_an_old_kubelet_without_get_allocatable_still_lists(short_tmp: Path) -> None:
    state = state_from_json(recorded("synthetic-k8s-gpus-by-index"))
    state.allocatable = None
    with kubelet(short_tmp, state):
        answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 2.0)
    assert answer.allocatable is None
    assert answer.list == state.listed
    assert "allocatable" not in answer.to_json()


def test_the_kubelets_rate_limit_reads_resource_exhausted(short_tmp: Path) -> None:
    state = state_from_json(recorded("synthetic-k8s-gpus-by-uuid"))
    state.burst = 0  # every token spent by other clients (dcgm-exporter scrapes, too)
    with kubelet(short_tmp, state):
        answer = LivePodResources(HostFS(short_tmp)).ask(DEFAULT_SOCKET, 2.0)
    assert answer == PodResourcesAnswer(error="RESOURCE_EXHAUSTED")


def test_snapshot_files_load_and_bad_ones_are_named(tmp_path: Path) -> None:
    assert load_podresources(tmp_path / "podresources.json").absent
    path = tmp_path / "podresources.json"
    path.write_text('{"error": "UNAVAILABLE"}')
    assert load_podresources(path) == PodResourcesAnswer(error="UNAVAILABLE")
    for bad, why in [
        ("[]", "not a JSON object"),
        ('{"error": 14}', "gRPC status name"),
        ('{"list": {"podResources": [{"nmae": "x"}]}}', "nmae"),
        ('{"list": {}, "extra": 1}', "unknown keys"),
        ("{}", 'needs a "list"'),
        ('{"list": {"podResources": [', "line 1"),
    ]:
        path.write_text(bad)
        with pytest.raises(SnapshotError, match=why):
            load_podresources(path)
