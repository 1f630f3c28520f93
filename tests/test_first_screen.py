"""The first screen of `gpuprobe check`: the verdict first, one cause per node-wide fault,
every line within the terminal's width."""

from __future__ import annotations

import functools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SNAPSHOTS, gpuprobe, snapshot
from gpuprobe.causes import gpu_list, group, template
from gpuprobe.checks.registry import sections
from gpuprobe.config import load_config
from gpuprobe.render import render_report, wrap
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, Status
from helpers import node_report

CAPTURED = datetime(2026, 11, 29, 21, tzinfo=UTC)
STATUS = re.compile(r"^(CRITICAL|WARNING |UNKNOWN |OK      )  ")


@functools.cache
def report_of(name: str) -> NodeReport:
    """Every check on a shipped snapshot, with the configuration shipped beside it if any
    (the snapshots whose fault is one against an expectation: docs/snapshot-format.md)."""
    beside = SNAPSHOTS / name / "gpuprobe.yaml"
    cfg = load_config(str(beside), sections()) if beside.exists() else None
    return node_report(name, cfg=cfg)


def fault_snapshots() -> list[str]:
    """Every shipped snapshot that is not healthy (with its configuration)."""
    names = sorted(p.name for p in SNAPSHOTS.iterdir() if p.is_dir())
    return [n for n in names if report_of(n).status is not Status.OK]


def screen(name: str, width: int | None = 80, verbose: bool = False) -> list[str]:
    text = render_report(
        report_of(name), width=width, replayed=True, captured_at=CAPTURED, verbose=verbose
    )
    return text.splitlines()


def test_the_snapshots_named_for_a_fault_show_it_with_the_configuration_beside_them() -> None:
    faults = fault_snapshots()
    assert {"synthetic-driver-too-old", "synthetic-rdma-rate-degraded"} <= set(faults)
    assert len(faults) >= 60
    # Without it they replay healthy: the fault is one against the expectation it states.
    assert node_report("synthetic-driver-too-old").status is Status.OK
    for name, code in (
        ("synthetic-driver-too-old", "DRIVER_TOO_OLD"),
        ("synthetic-rdma-rate-degraded", "RDMA_RATE_DEGRADED"),
    ):
        directory = snapshot(name)
        out = gpuprobe("check", "--snapshot", directory, "--config", f"{directory}/gpuprobe.yaml")
        assert out.returncode == 2
        assert out.stdout.startswith(f"CRITICAL  first: FIX_CONFIG for {code} on ") or (
            out.stdout.startswith(f"CRITICAL  first: CHECK_NETWORK for {code} on ")
        )


@pytest.mark.parametrize("name", fault_snapshots())
def test_the_first_screen_of_every_fault_snapshot(name: str) -> None:
    report = report_of(name)
    lines = screen(name)
    assert max(len(line) for line in lines) <= 80
    # The verdict first: the node's status and what to do first.
    assert lines[0].startswith(f"{report.status.value:<8}  first: ")
    node = lines.index("", 1) - 1  # the node and when: one line, or two on a long name
    assert lines[node].endswith("2026-11-29 21:00:00Z") and node <= 3
    causes = [c for check in report.checks for c in group((check.name, f) for f in check.findings)]
    floors = [c for c in report.checks if c.status is not Status.OK and not c.findings]
    count = len(causes) + len(floors)
    # With several causes, one line each right under the verdict: all on the first screen.
    start = node + 2
    if count > 1:
        start = lines.index("", start) + 1
        index = [line for line in lines[node + 2 : start - 1] if STATUS.match(line)]
        assert len(index) == count and start <= 50
    heads = [
        line
        for i, line in enumerate(lines[start:], start)
        if STATUS.match(line) and lines[i - 1] == "" and not line.startswith("OK")
    ]
    # Each cause in full once: a node-wide cause behind many GPU findings is one paragraph.
    assert len(heads) == count
    for cause in causes:
        assert len(cause.findings) == 1 or (
            sum(1 for line in heads if f"{cause.code} on {cause.where} " in line) == 1
        )
    # The causes come worst first, the first being the verdict's.
    ranks = [Status(line.split()[0]).rank for line in heads]
    assert ranks == sorted(ranks, reverse=True)
    assert ranks[0] == report.status.rank
    # The checks that are OK close the report on one (wrapped) line, then each check that did
    # not run on a line of its own.
    ok = [c.name for c in report.checks if c.status is Status.OK and not c.not_run]
    not_run = [c for c in report.checks if c.not_run]
    closing = lines[max(i for i, line in enumerate(lines) if line == "") + 1 :]
    first_not_run = next(
        (i for i, line in enumerate(closing) if line.startswith("NOT RUN")), len(closing)
    )
    ran = closing[:first_not_run]
    assert " ".join(ran).split() == ["OK", *(n + "," for n in ok[:-1]), ok[-1]]
    assert [line.split(":")[0] for line in closing if line.startswith("NOT RUN")] == [
        f"NOT RUN   {c.name}" for c in not_run
    ]


def test_a_node_wide_fault_on_eight_gpus_is_one_cause_on_the_screen() -> None:
    """The fabric manager not running on an NVSwitch node: eight FABRIC_NOT_READY findings
    (one per GPU, as the JSON, metrics and conditions keep them), one cause on the screen."""
    report = report_of("synthetic-fabric-not-started")
    assert [f.code for _, f in report.findings()] == ["FABRIC_NOT_READY"] * 8
    assert screen("synthetic-fabric-not-started") == [
        "CRITICAL  first: FIX_CONFIG for FABRIC_NOT_READY on GPUs 0-7 (gpus)",
        "node synthetic-fabric-not-started  snapshot captured 2026-11-29 21:00:00Z",
        "",
        "CRITICAL  FABRIC_NOT_READY on GPUs 0-7 (gpus)",
        "          NVSwitch fabric registration is not started and no",
        "          nvidia-fabricmanager runs: CUDA cannot start on an NVSwitch system",
        "          without it. Start the fabric manager (systemctl start",
        "          nvidia-fabricmanager) at the driver's exact version",
        "          action: FIX_CONFIG",
        "",
        "OK        driver, mig, xid, toolkit, cdi, device_plugin, sharing, workloads,",
        "          pods, lifecycle, network, rdma",
        "NOT RUN   nccl: not configured (nccl.binary)",
        "NOT RUN   storage: no storage path configured (storage.paths, --storage-path)",
    ]
    # README shows this very screen.
    readme = (SNAPSHOTS.parent.parent / "README.md").read_text()
    shown = readme.split("```\nCRITICAL  first: FIX_CONFIG for FABRIC_NOT_READY", 1)[1]
    shown = "CRITICAL  first: FIX_CONFIG for FABRIC_NOT_READY" + shown.split("```", 1)[0]
    assert shown.splitlines() == screen("synthetic-fabric-not-started")
    out = gpuprobe("check", "--json", "--snapshot", snapshot("synthetic-fabric-not-started"))
    gpus = next(c for c in out.json()["checks"] if c["name"] == "gpus")
    assert [f["resource"].split(":")[1] for f in gpus["findings"]] == [str(i) for i in range(8)]


def test_seven_pod_failures_fit_the_first_screen() -> None:
    lines = screen("synthetic-pods-log-signatures")
    assert lines[:13] == [
        "CRITICAL  first: RESET_GPU for XID on GPU 3, pod ml-team/llama-pretrain-3 (xid)",
        "node synthetic-pods-log-signatures  snapshot captured 2026-11-29 21:00:00Z",
        "",
        "CRITICAL  XID on GPU 3, pod ml-team/llama-pretrain-3: RESET_GPU",
        "CRITICAL  CDI_SPEC_STALE on node, pod ci/runner-gpu-7f9c-fghij: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 5, pod ci/runner-gpu-7f9c-abcde: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 6, pod ci/runner-gpu-7f9c-fghij: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 0, pod inference/vllm-0: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 3, pod ml-team/llama-pretrain-3: RESTART_APP",
        "WARNING   POD_GPU_FAILURE on GPU 1, pod ml-team/sample-check-0: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 2, pod ml-team/tf-serving-0: FIX_CONFIG",
        "WARNING   POD_GPU_FAILURE on GPU 4, pod monitoring/gpu-exporter-x2: RESTART_APP",
        "",
    ]


def gpu_finding(index: int, message: str, code: str = "X") -> Finding:
    uuid = f"GPU-5f1c000{index}-8e2b-4c1d-9a7e-00000000000{index}"
    return Finding(code, Severity.CRITICAL, message, Action.RESET_GPU, f"gpu:{index}:{uuid}")


def test_only_findings_that_differ_in_their_own_gpu_alone_are_one_cause() -> None:
    same = [
        gpu_finding(i, f"GPU {i} (0000:{a}:00.0): stuck. Reset it: nvidia-smi -r -i {i}")
        for i, a in ((0, "18"), (1, "2a"), (3, "5d"))
    ]
    [cause] = group(("gpus", f) for f in same)
    assert cause.where == "GPUs 0, 1, 3"
    assert cause.message == "stuck. Reset it: nvidia-smi -r -i <n>"
    differs = [
        gpu_finding(0, "GPU 0 (0000:18:00.0): seen 1 time"),
        gpu_finding(1, "GPU 1 (0000:2a:00.0): seen 2 times"),  # a different count
        gpu_finding(2, "GPU 2 (0000:3a:00.0): seen 1 time", code="Y"),  # a different code
        gpu_finding(3, "GPU 0 (0000:18:00.0): seen 1 time"),  # names GPU 0, not its own
        Finding("X", Severity.CRITICAL, "GPU 4: seen 1 time", Action.RESET_GPU, "node"),
    ]
    assert [len(c.findings) for c in group(("gpus", f) for f in differs)] == [1, 1, 1, 1, 1]
    # The same cause in two checks, or with other pods, is two causes.
    twice = group([("gpus", same[0]), ("xid", same[1])])
    assert len(twice) == 2
    # The GPU's UUID is its identity too; "GPU 1" inside "GPU 10" is not GPU 1.
    assert template(gpu_finding(1, "GPU 1 (GPU-5f1c0001-8e2b-4c1d-9a7e-000000000001) x")) == (
        "\0gpu\0 x"
    )
    assert template(gpu_finding(1, "GPU 10 and GPU 1.5")) == "GPU 10 and GPU 1.5"
    assert template(gpu_finding(1, "reset GPU 1.")) == "reset \0gpu\0."
    assert template(Finding("X", Severity.WARNING, "GPU 1", resource="node")) is None


def test_gpu_lists_name_runs_as_ranges() -> None:
    assert gpu_list([3]) == "GPU 3"
    assert gpu_list([6, 2]) == "GPUs 2, 6"
    assert gpu_list(range(8)) == "GPUs 0-7"
    assert gpu_list([0, 1, 2, 3, 5, 7, 8]) == "GPUs 0-3, 5, 7, 8"


def test_a_healthy_node_says_so_in_one_line() -> None:
    lines = screen("synthetic-h100-8gpu-healthy")
    # nccl and storage are not configured there: they did not run, and are not counted OK.
    assert lines[0] == "OK        13 checks OK, 2 not run, nothing to do"
    assert lines[3].startswith("OK        driver, gpus, mig, xid, ")
    assert "nccl" not in lines[3] and "nccl" not in lines[4]
    assert lines[-2:] == [
        "NOT RUN   nccl: not configured (nccl.binary)",
        "NOT RUN   storage: no storage path configured (storage.paths, --storage-path)",
    ]


def test_checks_that_did_not_run_are_shown_as_not_run_never_as_ok(tmp_path: Path) -> None:
    """`check --only nccl,storage` with neither configured said "OK 2 checks OK, nothing to
    do" while its JSON said `"ran": false`: the screen now says what the JSON says."""
    args = ("check", "--only", "nccl,storage", "--root", str(tmp_path))
    done = gpuprobe(*args)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == "OK        no check ran (2 not run): nothing was judged"
    assert lines[2:] == [
        "",
        "NOT RUN   nccl: not configured (nccl.binary)",
        "NOT RUN   storage: no storage path configured (storage.paths, --storage-path)",
    ]
    checks = json.loads(gpuprobe(*args, "--json").stdout)["checks"]
    assert [(c["name"], c["status"], c["data"]["ran"]) for c in checks] == [
        ("nccl", "OK", False),
        ("storage", "OK", False),
    ]
    verbose = gpuprobe(*args, "--verbose").stdout.splitlines()
    assert [line[:25] for line in verbose[3:]] == [
        "NOT RUN   nccl           ",
        "NOT RUN   storage        ",
    ]


def test_a_replayed_report_counts_its_not_run_checks_the_same() -> None:
    """The screen of a report read back from its JSON (what the audit and a saved report
    hold) counts the checks that did not run as the live one does."""
    report = report_of("h200-1gpu-580.159.04")
    again = NodeReport.from_dict(json.loads(report.to_json()))
    first = render_report(again, replayed=True, captured_at=CAPTURED).splitlines()[0]
    assert first == "OK        13 checks OK, 2 not run, nothing to do"
    assert render_report(again, replayed=True, captured_at=CAPTURED) == render_report(
        report, replayed=True, captured_at=CAPTURED
    )


def test_a_check_that_did_not_run_but_found_something_is_a_cause() -> None:
    """`ran: false` with a finding (the NCCL test that failed) or an UNKNOWN floor is judged as
    any cause; only a check that did not run and found nothing is "not run"."""
    failed = CheckResult(
        "nccl",
        "NCCL test failed",
        [Finding("NCCL_TEST_FAILED", Severity.CRITICAL, "exit 1", Action.DRAIN_NODE)],
        {"ran": False},
    )
    unknown = CheckResult("storage", "cannot tell", data={"ran": False}, floor=Status.UNKNOWN)
    skipped = CheckResult("nccl", "not configured (nccl.binary)", data={"ran": False})
    assert (failed.not_run, unknown.not_run, skipped.not_run) == (False, False, True)
    text = render_report(NodeReport("n1", CAPTURED, [failed, unknown])).splitlines()
    assert text[0] == "CRITICAL  first: DRAIN_NODE for NCCL_TEST_FAILED on node (nccl)"
    assert not any(line.startswith("NOT RUN") for line in text)


def test_a_check_that_could_not_judge_without_a_finding_is_a_cause() -> None:
    check = CheckResult("nccl", "nccl-tests did not run: no GPU", floor=Status.UNKNOWN)
    report = NodeReport("n1", CAPTURED, [CheckResult("driver", "ok"), check])
    assert render_report(report).splitlines() == [
        "UNKNOWN   first: read why nccl is UNKNOWN: nccl-tests did not run: no GPU",
        "node n1  2026-11-29 21:00:00Z",
        "",
        "UNKNOWN   nccl: nccl-tests did not run: no GPU",
        "",
        "OK        driver",
    ]


def test_the_header_is_never_split_inside_its_words() -> None:
    long = NodeReport(
        "gpu-node-" + "a" * 60, CAPTURED, [CheckResult("gpus", "s", [gpu_finding(0, "m")])]
    )
    lines = render_report(long, width=60, replayed=True, captured_at=CAPTURED).splitlines()
    assert lines[:4] == [
        "CRITICAL  first: RESET_GPU for X on GPU 0 (gpus)",
        "node gpu-node-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "          aaaaaaaaaaaaaa",
        "          snapshot captured 2026-11-29 21:00:00Z",  # the date and time together
    ]


WIDTHS = st.integers(min_value=40, max_value=200)


@settings(max_examples=60, deadline=None)
@given(
    width=WIDTHS,
    name=st.sampled_from(
        [
            "synthetic-pods-log-signatures",
            "synthetic-xid-critical",
            "synthetic-mps-on-mig",
            "synthetic-nvml-hang",
            "synthetic-gpu-lost",
        ]
    ),
    verbose=st.booleans(),
)
def test_every_line_fits_any_width_and_keeps_every_character(
    width: int, name: str, verbose: bool
) -> None:
    wrapped = screen(name, width, verbose)
    assert max(len(line) for line in wrapped) <= width
    whole = screen(name, None, verbose)
    # Only the line breaks differ: the same characters in the same order.
    assert "".join("".join(wrapped).split()) == "".join("".join(whole).split())


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.sampled_from("ab /:-.\u2026"), max_size=300),
    width=WIDTHS,
    indent=st.integers(min_value=0, max_value=25),
)
def test_wrap_keeps_within_the_width_under_its_hanging_indent(
    text: str, width: int, indent: int
) -> None:
    lines = wrap(text, indent, width)
    assert all(len(line) <= width for line in lines)
    assert all(line.startswith(" " * indent) for line in lines if line)
    assert "".join("".join(lines).split()) == "".join(text.split())
