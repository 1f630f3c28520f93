"""Every Kubernetes API request is bounded, and every odd answer is a counted error (issue:
a response trickling a byte every 3 s held the publisher for 45 s with
gpuprobe_kubernetes_up at 1; 300 MB node answers took the agent from 80 to 869 MB; a 307
without a content type, deep JSON and a list without `items` put tracebacks in the log).
The real client library (lightkube over httpx2) against the strict stand-in on loopback."""

from __future__ import annotations

import json
import logging
import random
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_reports import GPU_LOST, report

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.daemon import KubeCollector
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import Access, KubeApi, KubeError
from gpuprobe.kube.bounded import MAX_RESPONSE_BYTES
from gpuprobe.kube.pods import LivePodStatuses
from kube_standin import KubeStandIn, RawAnswer, node, running

NODE = "gpu-node-17"
TIMEOUT = 2.0  # kubernetes.timeout_seconds of these tests: the bound of each request
DRIP = 0.25  # a byte every quarter second: every read is on time, the request never ends
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def api(standin: KubeStandIn) -> KubeApi:
    return KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=TIMEOUT)


def in_thread(call: object, within: float) -> tuple[object, float]:
    """Run `call()` on a thread; its result (or exception) and how long it took, failing the
    test if it has not returned `within` seconds."""
    out: list[object] = []
    started = time.monotonic()

    def run() -> None:
        try:
            out.append(call())  # type: ignore[operator]
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"the call was still running after {within} s"
    return out[0], time.monotonic() - started


def up_metric(loop: EffectsLoop) -> float:
    (family, _) = list(KubeCollector(loop).collect())
    return float(family.samples[0].value)


def test_a_slow_drip_answer_ends_at_the_request_deadline(standin: KubeStandIn) -> None:
    client = api(standin)
    standin.faults.drip = DRIP
    outcome, took = in_thread(lambda: client.get_node(NODE), within=TIMEOUT + 4)
    assert isinstance(outcome, KubeError)
    assert (outcome.verb, outcome.code) == ("get", "timeout")
    assert TIMEOUT - 0.1 <= took < TIMEOUT + 1.5
    standin.faults.drip = 0.0
    outcome, took = in_thread(lambda: client.get_node(NODE), within=TIMEOUT + 4)
    assert isinstance(outcome, dict) and outcome["metadata"]["name"] == NODE
    assert took < 1.0


def test_the_publisher_is_down_while_the_server_drips_and_resumes_promptly_after(
    standin: KubeStandIn,
) -> None:
    config = KubernetesConfig(start_jitter_seconds=0)
    publisher = NodeEffects(api(standin), NODE, config, run="run1")
    loop = EffectsLoop(publisher, lambda _: None, config, rng=random.Random(3))
    loop.offer(report())
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait(lambda: loop.up, 10)
        assert up_metric(loop) == 1
        standin.faults.drip = DRIP
        dripping = time.monotonic()
        loop.offer(report(("gpus", GPU_LOST)))
        wait(lambda: not loop.up, TIMEOUT + 2)  # the first write timed out, at its deadline
        assert time.monotonic() - dripping >= TIMEOUT - 0.1
        assert up_metric(loop) == 0
        assert loop.errors[("patch", "timeout")] == 1
        time.sleep(3 * TIMEOUT)  # a few more tries time out, backing off
        assert not loop.up
        standin.faults.drip = 0.0
        recovered = time.monotonic()
        wait(lambda: loop.up, 20)
        # At most: the try in flight runs to its deadline, then the backoff of the few
        # failures so far (each at most 2^(n-1) s).
        assert time.monotonic() - recovered < TIMEOUT + 4 + 1.0
        assert standin.conditions(NODE)["GPUHardwareReady"]["reason"] == "GpuLost"
    finally:
        stop.set()
        loop.offer(None)
        standin.faults.drip = 0.0
        thread.join(TIMEOUT + 2)


def wait(condition: object, within: float) -> None:
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {within} s"
        time.sleep(0.02)


def huge_node(total: int) -> Iterator[bytes]:
    """A Node answer of `total` bytes, made on the way: a real node whose `status.images`
    runs on (the shape of a node answer that grew)."""
    obj = node(NODE)
    head, tail = json.dumps(obj).encode().rsplit(b"}", 1)
    image = b'{"names":["registry.example.com/train/pytorch@sha256:' + b"a" * 64 + b'"],'
    image += b'"sizeBytes":7340032000},'
    yield head + b',"status":{"images":['
    sent = len(head)
    chunk = image * 1000
    while sent < total:
        yield chunk
        sent += len(chunk)
    yield b'{"names":["last"],"sizeBytes":1}]}' + b"}" + tail


def test_an_answer_past_the_bound_is_abandoned_and_counted(standin: KubeStandIn) -> None:
    """A 300 MB node answer (no length announced): the read stops at MAX_RESPONSE_BYTES, the
    call fails `too_large`, the next one works."""
    config = KubernetesConfig()
    loop = EffectsLoop(NodeEffects(api(standin), NODE, config, run="run1"), lambda _: None, config)
    loop.offer(report())
    standin.faults.raw = [RawAnswer(200, JSON, lambda: huge_node(300 * 1024 * 1024))]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    _, took = in_thread(loop.step, within=30)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert loop.errors == {("get", "too_large"): 1} and not loop.up
    assert took < 10
    # What the stand-in could send before the client hung up: the bound and the socket
    # buffers, not the 300 MB.
    assert MAX_RESPONSE_BYTES <= standin.raw_sent < 4 * MAX_RESPONSE_BYTES
    assert grown < 200 * 1024  # KiB: the process's peak grew by less than 200 MB
    loop.step()
    assert loop.up


def test_an_announced_length_past_the_bound_is_refused_unread(standin: KubeStandIn) -> None:
    total = 300 * 1024 * 1024
    standin.faults.raw = [
        RawAnswer(200, {**JSON, "Content-Length": str(total)}, lambda: huge_node(total))
    ]
    outcome, _took = in_thread(lambda: api(standin).get_node(NODE), within=10)
    assert isinstance(outcome, KubeError)
    assert (outcome.code, outcome.message) == (
        "too_large",
        f"answer of {total} bytes refused (at most {MAX_RESPONSE_BYTES})",
    )
    assert standin.raw_sent < MAX_RESPONSE_BYTES  # hung up without reading it


DEEP = b'{"kind":"Node","apiVersion":"v1","metadata":{"name":"gpu-node-17"},"spec":' + (
    b'{"a":' * 200_000 + b"1" + b"}" * 200_000 + b"}"
)
ODD_ANSWERS = {
    # A redirect without a content type (a misrouted proxy, an API server moved): never
    # followed, counted by its status.
    "redirect": (
        RawAnswer(307, {"Location": "https://127.0.0.1:1/api/v1/nodes/gpu-node-17"}),
        "307",
    ),
    # An error page of a proxy in front of the API server (HTML, no Status).
    "proxy error": (
        RawAnswer(502, {"Content-Type": "text/html"}, b"<html><body>Bad Gateway</body></html>"),
        "502",
    ),
    "deep JSON": (RawAnswer(200, JSON, DEEP), "invalid"),
    "deep JSON error": (RawAnswer(500, JSON, b"[" * 200_000 + b"]" * 200_000), "invalid"),
    "not JSON": (RawAnswer(200, {"Content-Type": "text/plain"}, b"ok"), "invalid"),
    "truncated JSON": (RawAnswer(200, JSON, b'{"kind":"Node","apiVersion":"v1","meta'), "invalid"),
    "a list for an object": (RawAnswer(200, JSON, b"[]"), "invalid"),
}


@pytest.mark.parametrize("case", list(ODD_ANSWERS))
def test_an_odd_answer_is_a_counted_error_and_no_traceback(
    standin: KubeStandIn, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw, code = ODD_ANSWERS[case]
    config = KubernetesConfig()
    loop = EffectsLoop(NodeEffects(api(standin), NODE, config, run="run1"), lambda _: None, config)
    loop.offer(report())
    standin.faults.raw = [raw]
    with caplog.at_level(logging.DEBUG):
        loop.step()
    assert loop.errors == {("get", code): 1} and not loop.up
    assert up_metric(loop) == 0
    assert [r for r in caplog.records if r.exc_info] == []
    assert "Traceback" not in caplog.text
    loop.step()
    assert loop.up


LIST_WITHOUT_ITEMS = RawAnswer(
    200, JSON, b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"}}'
)
LIST_OF_STRINGS = RawAnswer(
    200, JSON, b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":["a","b"]}'
)


def test_a_list_without_items_is_invalid(standin: KubeStandIn) -> None:
    client = api(standin)
    standin.faults.raw = [LIST_WITHOUT_ITEMS]
    with pytest.raises(KubeError) as failed:
        client.list_nodes("nvidia.com/gpu.present=true")
    assert (failed.value.verb, failed.value.code) == ("list", "invalid")
    assert "items" in failed.value.message


@pytest.mark.parametrize("raw", [LIST_WITHOUT_ITEMS, LIST_OF_STRINGS])
def test_the_pods_check_source_answers_invalid_for_an_odd_pod_list(
    standin: KubeStandIn, raw: RawAnswer
) -> None:
    standin.faults.raw = [raw]
    answer = LivePodStatuses(api(standin)).ask(NODE)
    assert answer.error is not None and answer.error.code == "invalid"
    assert LivePodStatuses(api(standin)).ask(NODE).error is None  # the next one is read
