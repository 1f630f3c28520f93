"""Fuzzing every kind of input a user or an attacker hands gpuprobe: the configuration and each
file of a snapshot (its JSON files, and host files under rootfs/ that the readers parse), and
the API objects `audit --kubeconfig` reads (at the end of this file).

Each case mutates one file of a real snapshot (bytes cut, inserted, replaced or repeated; for
JSON also a value swapped for an odd one: 10^400, deep nesting, a wrong type) and then does what
`gpuprobe check --snapshot` and the daemon do with it: load, run the passive checks, write the
JSON and text reports, render /metrics and the GetReport message. A crash is anything that
escapes as an exception, an error message longer than one line, a check that overran its
deadline (a hang) or a check that failed with an exception (CHECK_FAILED).

The default run is small (GPUPROBE_FUZZ_EXAMPLES cases per kind, 8 unless set, derandomized
so it never flakes); docs/benchmarks.md records a long run.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

import helpers
from conftest import ROOT, snapshot
from gpuprobe import wire
from gpuprobe.checks.registry import sections
from gpuprobe.config import load_config
from gpuprobe.daemon.store import AgentState
from gpuprobe.errors import UsageError
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.render import render_report
from gpuprobe.report import NodeReport, Status
from gpuprobe.serve.metrics import ReportCollector
from serving import PASSIVE

EXAMPLES = int(os.environ.get("GPUPROBE_FUZZ_EXAMPLES", "8"))
CONFIG = "config.yaml"  # the kinds that are not snapshot files
KUBECONFIG = "kubeconfig"
NCCL_OUTPUT = "all_gather_perf.out"
KMSG = "rootfs/dev/kmsg"
# The kmsg kind's XID record (the driver's, facility 0, on GPU 3): while it stands whole on a
# line of its own, the xid check must report it, whatever was done around it (a false OK).
KMSG_XID = (
    b"4,4,46681220311,-;NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
    b"GPU has fallen off the bus."
)
KMSG_RING = (Path(snapshot("synthetic-kmsg-journald-only")) / KMSG).read_bytes()
# A kubeconfig of the shape `kubectl config view --raw` prints (never used to connect).
KUBECONFIG_TEXT = """apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    server: https://10.0.0.1:6443
  name: gpu-cluster
contexts:
- context:
    cluster: gpu-cluster
    namespace: gpuprobe
    user: gpuprobe
  name: gpuprobe@gpu-cluster
current-context: gpuprobe@gpu-cluster
preferences: {}
users:
- name: gpuprobe
  user:
    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.e30.c2lnbmF0dXJl
"""
NCCL_FIXTURE = ROOT / "tests" / "fixtures" / "nccl" / "all_gather_perf-2019-layout.txt"
# A configuration touching every section, so that mutations reach every converter.
CONFIG_TEXT = (ROOT / "daemonset" / "base" / "config.yaml").read_text() + (
    "checks: {deadline_seconds: 5, deadlines: {gpus: 8}}\n"
    "driver: {min_version: '550.54.15', required_cuda: ['12.4']}\n"
    "gpus: {expect: 8, idle_window_seconds: 600}\n"
    "network: {fabric_interfaces: ['ib*'], min_speed_mbps: 400000}\n"
    "rdma: {expected_rate_gbps: 400, devices: [mlx5_2], test: {message_bytes: 8388608}}\n"
    "serve: {interval_seconds: 60, intervals: {xid: 10}, calls_per_minute: 6.0}\n"
)


@dataclass(frozen=True)
class Kind:
    """One kind of input: a file of a committed snapshot (or the configuration)."""

    name: str
    snapshot: str
    path: str
    json: bool


KINDS = [
    Kind("config", "synthetic-h100-k8s-containerd-healthy", CONFIG, json=False),
    Kind("snapshot.json", "synthetic-h100-k8s-containerd-healthy", "snapshot.json", json=True),
    Kind("nvml.json", "synthetic-h100-k8s-containerd-healthy", "nvml.json", json=True),
    Kind("processes.json", "synthetic-gpu-processes", "processes.json", json=True),
    Kind("netlink.json", "synthetic-ndr-fabric-healthy", "netlink.json", json=True),
    Kind("device-plugin.json", "synthetic-mps-daemon-missing", "device-plugin.json", json=True),
    Kind("kernel log", "synthetic-fabric-in-progress", "rootfs/var/log/kern.log", json=False),
    Kind(
        "driver version",
        "synthetic-h100-k8s-containerd-healthy",
        "rootfs/proc/driver/nvidia/version",
        json=False,
    ),
    Kind(
        "containerd config",
        "synthetic-h100-k8s-containerd-healthy",
        "rootfs/etc/containerd/config.toml",
        json=False,
    ),
    Kind(
        "CDI spec",
        "synthetic-cdi-device-plugin-spec",
        "rootfs/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json",
        json=True,
    ),
    Kind(
        "InfiniBand port rate",
        "synthetic-ndr-fabric-healthy",
        "rootfs/sys/class/infiniband/mlx5_2/ports/1/rate",
        json=False,
    ),
    Kind(
        "OCI spec",
        "synthetic-pods-cuda12.8-geforce-550",
        "rootfs/run/containerd/io.containerd.runtime.v2.task/k8s.io/"
        "b7b211d6fa61bc5fd08e9a12a468b700868839372bc547c7b6603323dbc8d1ce/config.json",
        json=True,
    ),
    Kind("kubeconfig", "synthetic-h100-8gpu-healthy", KUBECONFIG, json=False),
    Kind("nccl-tests output", "synthetic-h100-8gpu-healthy", NCCL_OUTPUT, json=False),
    Kind("kmsg records", "synthetic-kmsg-journald-only", KMSG, json=False),
]
OUTSIDE = {CONFIG, KUBECONFIG, NCCL_OUTPUT}  # written beside the snapshot, not in it

# Bytes that have broken parsers before: non-UTF-8, JSON's non-standard constants, numbers
# beyond a float or an int's text limit, nesting, quotes, a real kernel-log XID line.
NASTY = [
    b"\x00",
    b"\xff\xfe",
    b"Infinity",
    b"-Infinity",
    b"NaN",
    b"1e400",
    b"9" * 400,
    b"9" * 5000,
    b"[" * 3000,
    b"{" * 3000,
    b"- " * 2000,
    b"-1",
    b"0",
    b"\n\n",
    b"'",
    b'"',
    b"\\",
    b"&a [*a, *a]",
    b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n",
    b"A" * 100_000,
]
ODD_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64,
    10**400,
    10**7,
    -(10**30),
    1e308,
    "",
    "x" * 10_000,
    [],
    {},
    [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
]


def json_values() -> st.SearchStrategy[Any]:
    """Odd JSON values: the list above, and small random trees."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    )
    trees = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=8,
    )
    return st.one_of(st.sampled_from(ODD_VALUES), trees)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document (the root included)."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from paths(value, (*prefix, i))


def replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[head] = replaced(doc[head], rest, value)
    return copy


@st.composite
def byte_mutation(draw: st.DrawFn, original: bytes) -> bytes:
    """The file with up to three cuts, insertions, replacements or repeats."""
    data = original
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "insert", "replace", "repeat"]))
        piece = draw(st.one_of(st.sampled_from(NASTY), st.binary(max_size=16)))
        if op == "truncate":
            data = data[:at]
        elif op == "insert":
            data = data[:at] + piece + data[at:]
        elif op == "replace":
            data = data[:at] + piece + data[at + draw(st.integers(0, 64)) :]
        else:
            span = data[at : at + draw(st.integers(1, 4096))]
            data = data[:at] + span * draw(st.integers(2, 50)) + data[at:]
    return data


@st.composite
def json_mutation(draw: st.DrawFn, original: bytes) -> bytes:
    """The document with one value swapped for an odd one (or the bytes mutated)."""
    if draw(st.booleans()):
        return draw(byte_mutation(original))
    doc = json.loads(original)
    places = list(paths(doc))
    path = places[draw(st.integers(0, len(places) - 1))]
    return json.dumps(replaced(doc, path, draw(json_values()))).encode()


@contextmanager
def mutated(kind: Kind, data: bytes) -> Iterator[tuple[Path, Path | None]]:
    """A copy of the kind's snapshot with its file replaced by `data`; (snapshot, config)."""
    with tempfile.TemporaryDirectory(prefix="gpuprobe-fuzz-") as tmp:
        target = Path(tmp) / "snap"
        shutil.copytree(snapshot(kind.snapshot), target, symlinks=True)
        config = Path(tmp) / CONFIG
        config.write_text(CONFIG_TEXT)
        (Path(tmp) / kind.path if kind.path in OUTSIDE else target / kind.path).write_bytes(data)
        yield target, config


def original(kind: Kind) -> bytes:
    if kind.path == CONFIG:
        return CONFIG_TEXT.encode()
    if kind.path == KUBECONFIG:
        return KUBECONFIG_TEXT.encode()
    if kind.path == NCCL_OUTPUT:
        return NCCL_FIXTURE.read_bytes()
    return (Path(snapshot(kind.snapshot)) / kind.path).read_bytes()


def judge_kind(kind: Kind, directory: Path, config_path: Path) -> None:
    """The judge for the kind: a kubeconfig is read as `--kubeconfig` reads it, nccl-tests
    output as the nccl check reads its binary's, everything else as `check --snapshot`."""
    if kind.path == KUBECONFIG:
        judge_kubeconfig(directory.parent / KUBECONFIG)
    elif kind.path == NCCL_OUTPUT:
        judge_nccl(directory, directory.parent / NCCL_OUTPUT)
    else:
        report = judge(directory, config_path)
        if kind.path == KMSG and report is not None:
            judge_kmsg_xid((directory / KMSG).read_bytes(), report)


def judge_kmsg_xid(ring: bytes, report: NodeReport) -> None:
    """No false OK: while the XID record stands whole on a line of its own, the xid check
    reports XID 79 on GPU 3, CRITICAL."""
    if KMSG_XID not in ring.split(b"\n"):
        return
    check = report.check("xid")
    assert check is not None
    xids = [(x["gpu"], x["xid"]) for x in check.data["xids"]]
    assert (3, 79) in xids and check.status == Status.CRITICAL, (check.summary, xids)


def judge_kubeconfig(path: Path) -> None:
    """Read as every command's `--kubeconfig` is (no connection is made): a client, or one
    line of usage error."""
    from gpuprobe.kube.api import Access, KubeApi

    try:
        KubeApi(Access(kubeconfig=str(path)), timeout=1).close()
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc), repr(exc)


def judge_nccl(directory: Path, output: Path) -> None:
    """The nccl check with a binary that prints `output` (the real one needs GPUs): any
    verdict, never a crash."""
    binary = directory.parent / "all_gather_perf"
    binary.write_text(f"#!/bin/sh\ncat {output}\n")
    binary.chmod(0o755)
    config = helpers.config(
        nccl={"binary": str(binary), "force": True, "args": ["-b", "32M", "-e", "256M", "-f", "2"]}
    )
    report = run_checks(snapshot_host(str(directory)), config, ["nccl"])
    broken = [f.code for c in report.checks for f in c.findings if f.code.startswith("CHECK_")]
    assert not broken, (broken, report.checks[0].summary)
    json.loads(report.to_json())
    wire.report_to_proto(report, {})


def judge(directory: Path, config_path: Path | None) -> NodeReport | None:
    """Do what `check --snapshot` and the daemon do; assert nothing crashed. The report, or
    None where the input was refused."""
    try:
        config = load_config(str(config_path) if config_path else None, sections())
        host = snapshot_host(str(directory))
    except UsageError as exc:  # a clear one-line refusal is the right answer
        assert str(exc) and "\n" not in str(exc), repr(exc)
        return None
    report = run_checks(host, config, PASSIVE)
    broken = [
        (c.name, f.code, f.message)
        for c in report.checks
        for f in c.findings
        if f.code in ("CHECK_FAILED", "CHECK_TIMEOUT")
    ]
    assert not broken, broken
    json.loads(report.to_json())
    render_report(report, colour=False)
    registry = CollectorRegistry()
    collector = ReportCollector(host.node_name)
    registry.register(collector)
    collector.update(AgentState(report, {}, version=1, change=1))
    generate_latest(registry)
    wire.report_to_proto(report, {})
    return report


def test_the_unmutated_inputs_pass_the_judge() -> None:
    """The judge itself is sound: every base snapshot and the config pass it untouched."""
    for kind in KINDS:
        with mutated(kind, original(kind)) as (directory, config):
            judge_kind(kind, directory, config)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_mutated_inputs_never_crash(kind: Kind) -> None:
    base = original(kind)
    strategy = json_mutation(base) if kind.json else byte_mutation(base)
    cases: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize="GPUPROBE_FUZZ_EXAMPLES" not in os.environ,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=strategy)
    def case(data: bytes) -> None:
        cases.append(len(data))
        with mutated(kind, data) as (directory, config):
            judge_kind(kind, directory, config)

    case()
    # The record docs/benchmarks.md keeps (seen with pytest -s).
    print(f"fuzz {kind.name}: {len(cases)} cases, 0 crashes, largest {max(cases)} bytes")
    assert len(cases) >= min(EXAMPLES, 8)


def cdi_spec_with(edit: dict[str, Any]) -> bytes:
    kind = next(k for k in KINDS if k.name == "CDI spec")
    doc = json.loads(original(kind))
    doc["containerEdits"] = {**doc.get("containerEdits", {}), **edit}
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("kind_name", "data"),
    [
        # CDI: a hookName that is a list (unhashable in the name lookup: TypeError).
        ("CDI spec", cdi_spec_with({"hooks": [{"hookName": [], "path": "/usr/bin/x"}]})),
        ("CDI spec", cdi_spec_with({"deviceNodes": [{"path": "/dev/nvidia0", "type": ["c"]}]})),
        # CDI: a relative host path (HostFS takes absolute paths only: ValueError).
        ("CDI spec", cdi_spec_with({"mounts": [{"hostPath": "x" * 300, "containerPath": "/x"}]})),
        # sysfs: an InfiniBand rate of 250,000 digits (the rate pattern backtracked for minutes).
        ("InfiniBand port rate", b"9" * 250_000),
        # YAML and TOML nested past the parsers' stack: a RecursionError caught inside
        # PyYAML ended the process ("Cannot recover from stack overflow").
        (
            "device-plugin.json",
            json.dumps({"config_file": "/c.yaml", "content": "- " * 3000}).encode(),
        ),
        ("config", b"serve:\n  intervals: " + b"[" * 3000 + b"\n"),
        ("config", b"a:\n" + b"".join(b" " * i + b"- x:\n" for i in range(0, 3000, 2))),
        ("containerd config", b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n"),
        # Issue 31's bounds: a spec nested past the JSON decoder's stack (the pods check was
        # UNKNOWN for every container), a key given twice, kubeconfigs lightkube indexed
        # into, and nccl-tests output that is not UTF-8.
        ("OCI spec", b'{"annotations": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("config", b"serve:\n  interval_seconds: 30\nserve:\n  intervals: {xid: 10}\n"),
        ("kubeconfig", KUBECONFIG_TEXT.replace("clusters:", "clusterz:").encode()),
        ("kubeconfig", b"- " + KUBECONFIG_TEXT.encode()),
        ("kubeconfig", gzip.compress(KUBECONFIG_TEXT.encode())),
        ("nccl-tests output", NCCL_FIXTURE.read_bytes().replace(b"dgx1", b"dgx\xff", 1)),
        # Issue 41's kmsg replay: a forged huge sequence number before the XID hid it (a false
        # OK), a stamp past the calendar raised OverflowError, and a copy of the XID record cut
        # short under its number (reading Xid 7) hid the record itself.
        ("kmsg records", b"4,18446744073709551615,5,-;forged\n" + KMSG_RING),
        ("kmsg records", b"4,999999999999999999999999,5,-;past u64\n" + KMSG_RING),
        ("kmsg records", KMSG_RING + b"4,7,18446744073709551615,-;NVRM: stamped past 9999\n"),
        (
            "kmsg records",
            b"\n".join(
                KMSG_XID.split(b"9,")[0] + b"\n" + line if line == KMSG_XID else line
                for line in KMSG_RING.split(b"\n")
                if not line.startswith(b"3,5,")  # the driver's XID-less line for the fault
            ),
        ),
        # A "Linux version" record after the XID: the ring is one boot's, it begins nothing.
        ("kmsg records", KMSG_RING + b"5,9,46690000000,-;Linux version 6.8.0-49-generic\n"),
    ],
    ids=[
        "cdi-hook-name-list",
        "cdi-node-type-list",
        "cdi-relative-host-path",
        "ib-rate-digits",
        "device-plugin-yaml-deep",
        "config-flow-deep",
        "config-block-deep",
        "containerd-toml-deep",
        "oci-spec-deep",
        "config-duplicate-key",
        "kubeconfig-no-clusters",
        "kubeconfig-list",
        "kubeconfig-gzip",
        "nccl-not-utf8",
        "kmsg-forged-u64-sequence",
        "kmsg-sequence-past-u64",
        "kmsg-stamp-past-calendar",
        "kmsg-cut-copy-same-number",
        "kmsg-boot-record-after-xid",
    ],
)
def test_what_fuzzing_found_stays_fixed(kind_name: str, data: bytes) -> None:
    kind = next(k for k in KINDS if k.name == kind_name)
    with mutated(kind, data) as (directory, config):
        judge_kind(kind, directory, config)


# -- the cluster view's API objects ------------------------------------------------------------
# What `audit --kubeconfig` reads: every answer the API server gave for a healthy GPU cluster
# (tests/cluster_objects.py), one document by request (path and selectors), mutated as one
# JSON document and then answered by the stand-in as it is, instead of the real objects. The
# judge: the audit ends (within its deadline and the view's grace: no hang) with a report it
# can write as JSON and text (no crash), and whatever could not be read (a source failed, an
# object skipped) leaves the view short of OK (no false OK).
CLUSTER_DEADLINE = 5.0


@contextmanager
def cluster_under_test(unwatched: bool = False) -> Iterator[tuple[Any, bytes]]:
    """The stand-in serving the healthy cluster, its agent answering; with `unwatched`, a
    second GPU node with no agent and a finished GPU pod on it (the view lists its pods);
    (stand-in, the answers the view read, as one JSON document)."""
    from cluster_objects import (
        GFD,
        GPU_NODE,
        gpu_node_status,
        healthy_gpu_cluster,
        now,
        pod,
        recording,
        started,
    )
    from serving import in_process_agent

    with (
        tempfile.TemporaryDirectory(prefix="gpuprobe-fuzz-") as tmp,
        in_process_agent("synthetic-h100-8gpu-healthy", node_name=GPU_NODE) as agent,
    ):
        standin = started(Path(tmp))
        try:
            healthy_gpu_cluster(standin, agent.grpc_port, now())
            if unwatched:
                standin.add_node("gpu-node-2", GFD, status=gpu_node_status("8"))
                done = pod("etl-0", {"nvidia.com/gpu": "1"}, "2026-12-01T00:00:00Z", "Succeeded")
                done["spec"]["nodeName"] = "gpu-node-2"
                standin.add_pod(done)
            with recording(standin) as answered:
                report = audit_cluster(standin)
            assert report.view is not None
            assert not unwatched or any("spec.nodeName=gpu-node-2" in k for k in answered)
            assert unwatched or report.view.status.value == "OK", [
                (i.name, i.status.value, i.summary) for i in report.view.items
            ] + [f.code for f in report.view.findings]
            yield standin, json.dumps(answered).encode()
        finally:
            standin.stop()


def audit_cluster(standin: Any) -> Any:
    """`audit --kubeconfig` in process, within the deadline and the view's grace."""
    import time

    from cluster_objects import TOKEN
    from gpuprobe.audit.run import VIEW_GRACE_SECONDS, AuditOptions, audit
    from gpuprobe.kube.api import Access

    start = time.monotonic()
    access = Access(kubeconfig=str(standin.kubeconfig(TOKEN)))
    report = audit(AuditOptions(targets=[], deadline=CLUSTER_DEADLINE, kube=access))
    took = time.monotonic() - start
    assert took < CLUSTER_DEADLINE + VIEW_GRACE_SECONDS + 1, f"a hang: {took:.1f} s"
    return report


def judge_cluster(standin: Any, base: bytes, data: bytes) -> None:
    """Serve the mutated answers (the bytes at every path when they are no longer one JSON
    object of answers) and audit."""
    from gpuprobe.audit.render import render_cluster
    from gpuprobe.report import Status

    keys = list(json.loads(base))
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and set(doc) == set(keys):
        standin.faults.served = {k: json.dumps(v).encode() for k, v in doc.items()}
    else:
        standin.faults.served = dict.fromkeys(keys, data)
    try:
        report = audit_cluster(standin)
    finally:
        standin.faults.served = {}
    view = report.view
    assert view is not None
    json.loads("".join(report.json_chunks()))
    render_cluster(report, colour=False, width=80)
    short = [
        s.to_dict()
        for s in view.sources
        if s.state in ("failed", "forbidden") or s.unreadable or s.name == "view"
    ]
    if short:  # never a false OK
        assert view.status != Status.OK and report.status != Status.OK, short
        unreadable = [s for s in view.sources if s.unreadable]
        named = [f.message for f in view.findings if f.code == "API_OBJECT_UNREADABLE"]
        assert len(named) == len(unreadable), (named, unreadable)


def cluster_mutation(base: bytes) -> st.SearchStrategy[bytes]:
    """One answer's value swapped (mostly: what a wrong-typed object is), or the bytes cut."""
    return st.one_of(json_mutation(base), json_mutation(base), json_mutation(base))


@pytest.mark.parametrize("unwatched", [False, True], ids=["healthy", "node-without-agent"])
def test_mutated_cluster_objects_never_crash(unwatched: bool) -> None:
    cases: list[int] = []
    with cluster_under_test(unwatched) as (standin, base):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize="GPUPROBE_FUZZ_EXAMPLES" not in os.environ,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(data=cluster_mutation(base))
        def case(data: bytes) -> None:
            cases.append(len(data))
            judge_cluster(standin, base, data)

        case()
    kind = "cluster API objects" + (", a node without agent" if unwatched else "")
    print(f"fuzz {kind}: {len(cases)} cases, 0 crashes, largest {max(cases)} bytes")
    assert len(cases) >= min(EXAMPLES, 8)
