"""`gpuprobe check` as a real process: output, exit statuses and usage errors."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from conftest import SNAPSHOTS, gpuprobe, schema, snapshot
from gpuprobe.checks.registry import CHECKS, active
from gpuprobe.render import render_report
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity

EXIT = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}


def test_live_check_on_a_gpu_less_machine_is_contract_valid() -> None:
    out = gpuprobe("check", "--json", env={"NODE_NAME": "ci-node"})
    report = out.json()
    jsonschema.validate(report, schema("report.schema.json"))
    assert report["node"] == "ci-node"
    codes = {f["code"] for c in report["checks"] for f in c["findings"]}
    assert codes & {"NO_GPU", "DRIVER_NOT_FOUND"}
    assert out.returncode == EXIT[report["status"]]
    driver = next(c for c in report["checks"] if c["name"] == "driver")
    assert {"driver_version", "cuda_driver_version"} <= set(driver["data"])


@pytest.mark.parametrize("name", sorted(p.name for p in SNAPSHOTS.iterdir() if p.is_dir()))
def test_every_snapshot_gives_a_valid_report_and_the_matching_exit(name: str) -> None:
    out = gpuprobe("check", "--json", "--snapshot", snapshot(name))
    report = out.json()
    jsonschema.validate(report, schema("report.schema.json"))
    assert out.returncode == EXIT[report["status"]]
    assert report["node"] == json.loads((SNAPSHOTS / name / "snapshot.json").read_text())["node"]


def test_human_report_shows_status_summary_finding_and_action() -> None:
    out = gpuprobe("check", "--snapshot", snapshot("synthetic-gpu-lost"))
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert lines[0] == "CRITICAL  first: REBOOT_NODE for GPU_LOST on GPU 5 (gpus)"
    assert lines[1].startswith("node synthetic-gpu-lost ")
    assert lines[3:7] == [
        "CRITICAL  GPU_LOST on gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005 (gpus)",
        "          GPU 5 is lost: NVML reports GpuIsLost (fallen off the bus or hung). Reboot "
        "the node; inspect the GPU if it happens again",
        "          action: REBOOT_NODE",
        "",
    ]
    assert lines[7:] == [
        "OK        driver, mig, xid, toolkit, cdi, device_plugin, sharing, workloads, pods, "
        "lifecycle, network, rdma",
        "NOT RUN   nccl: not configured (nccl.binary)",
        "NOT RUN   storage: no storage path configured (storage.paths, --storage-path)",
    ]
    assert "\033[" not in out.stdout
    verbose = gpuprobe("check", "--verbose", "--snapshot", snapshot("synthetic-gpu-lost"))
    lines = verbose.stdout.splitlines()
    assert lines[:7] == out.stdout.splitlines()[:7]  # the verdict and the causes, as without
    checks = [re.sub(r"\(\d+\.\d\d s\)$", "(s)", line) for line in lines[7:]]
    assert checks[0] == (
        "OK        driver         driver 550.54.15, CUDA 12.4 (runs toolkits up to 12.4 Update 1)"
        "  (s)"
    )
    assert checks[1] == "CRITICAL  gpus           1 of 8 GPUs lost  (s)"
    assert checks[-2].startswith("NOT RUN   nccl           not configured")
    assert [line[10:].split()[0] for line in checks] == [
        c["name"]
        for c in gpuprobe("check", "--json", "--snapshot", snapshot("synthetic-gpu-lost")).json()[
            "checks"
        ]
    ]


def test_only_runs_the_named_checks() -> None:
    out = gpuprobe(
        "check", "--json", "--only", "gpus", "--snapshot", snapshot("synthetic-gpu-lost")
    )
    assert [c["name"] for c in out.json()["checks"]] == ["gpus"]


def test_expect_gpus_and_node_name_flags() -> None:
    healthy = snapshot("synthetic-h100-8gpu-healthy")
    assert gpuprobe("check", "--snapshot", healthy, "--expect-gpus", "8").returncode == 0
    out = gpuprobe(
        "check", "--json", "--snapshot", healthy, "--expect-gpus", "9", "--node-name", "n9"
    )
    assert out.returncode == 2
    assert out.json()["node"] == "n9"


def test_config_file_is_applied(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("driver:\n  required_cuda: ['13.0']\n")
    out = gpuprobe(
        "check", "--json", "--snapshot", snapshot("synthetic-driver-too-old"), "--config", str(cfg)
    )
    assert out.returncode == 2
    driver = out.json()["checks"][0]
    assert [f["code"] for f in driver["findings"]] == ["DRIVER_TOO_OLD"]


def corrupt_snapshot(tmp_path: Path) -> str:
    path = tmp_path / "corrupt"
    path.mkdir()
    (path / "nvml.json").write_text('{"format": 1, "calls": [{"fn": "nvmlX"')
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--bogus"], "unrecognized arguments: --bogus (see gpuprobe check --help)"),
        (["check", "--only", "driver,warp"], "unknown check 'warp'"),
        (["check", "--only", ","], "names no check (see gpuprobe check --help)"),
        (["check", "--expect-gpus", "many"], "not a whole number: 'many' (see gpuprobe check"),
        (
            ["check", "--expect-gpus", str(2**53)],
            "--expect-gpus: expect: 9007199254740992 is beyond any sensible count or size",
        ),
        (["capture", "/tmp/x", "--bogus"], "--bogus (see gpuprobe capture --help)"),
        (["check", "--snapshot", "/nonexistent/snap"], "/nonexistent/snap: not a directory"),
        (
            ["check", "--snapshot", str(SNAPSHOTS)],  # the folder of snapshots, not one
            f"snapshot {SNAPSHOTS}: not a node snapshot: it holds none of snapshot.json, "
            "nvml.json, rootfs/ (what gpuprobe capture writes)",
        ),
        (["check", "--snapshot", "EMPTY"], "holds none of snapshot.json, nvml.json, rootfs/"),
        (["check", "--config", "/nonexistent.yaml"], "config /nonexistent.yaml: No such file"),
        (["check", "--root", "/nonexistent"], "--root /nonexistent: not a directory"),
        (["check", "--snapshot", "CORRUPT"], "nvml.json: line 1 column"),
        (["check", "--snapshot", "CORRUPT", "--root", "/tmp"], "exclude each other"),
        # `/` too: it was taken silently (the default), and the snapshot replayed (issue 40
        # item 16).
        (
            ["check", "--root", "/", "--snapshot", "HEALTHY"],
            "--snapshot and --root exclude each other (a snapshot replays its own rootfs; "
            "--root / would be ignored)",
        ),
        (["serve", "--snapshot", "HEALTHY", "--root", "/"], "exclude each other"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required: command"),
        # The agent keeps one state directory: two settings naming two are refused, never
        # one check's state moved elsewhere silently (the daemon's and the one-shot's alike).
        *(
            (
                [command, "--snapshot", "HEALTHY", "--config", "TWO_DIRS"],
                "xid.state_dir (/var/lib/gpuprobe) and workloads.state_dir (/srv/gpuprobe) name "
                "different state directories: the agent keeps one; set them to the same "
                "directory, or set one",
            )
            for command in ("check", "serve")
        ),
    ],
)
def test_usage_errors_exit_64_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    named = {
        "CORRUPT": corrupt_snapshot(tmp_path),
        "EMPTY": str(tmp_path / "empty"),
        "HEALTHY": snapshot("synthetic-h100-8gpu-healthy"),
        "TWO_DIRS": str(tmp_path / "two-dirs.yaml"),
    }
    (tmp_path / "two-dirs.yaml").write_text(
        "xid: {state_dir: /var/lib/gpuprobe}\nworkloads: {state_dir: /srv/gpuprobe}\n"
    )
    args = [named.get(a, a) for a in args]
    out = gpuprobe(*args)
    assert out.returncode == 64
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert message in out.stderr
    assert out.stderr.startswith("gpuprobe: ")
    # Every usage error points at the help of its command, whatever found it (argparse, or
    # the command once it ran: a snapshot, a config, a root); README says so.
    command = args[0] if args and args[0] in ("check", "capture", "serve") else None
    helps = f" (see gpuprobe {command} --help)\n" if command else " (see gpuprobe --help)\n"
    assert out.stderr.endswith(helps), out.stderr


def test_a_root_beside_a_snapshot_is_refused_and_neither_alone_is() -> None:
    healthy = snapshot("synthetic-h100-8gpu-healthy")
    assert gpuprobe("check", "--snapshot", healthy, "--only", "driver").returncode == 0
    assert gpuprobe("check", "--root", "/", "--only", "driver").returncode != 64


def test_help_and_version() -> None:
    out = gpuprobe("--help")
    assert out.returncode == 0
    assert "check" in out.stdout and "capture" in out.stdout
    assert gpuprobe("--version").stdout.startswith("gpuprobe ")


def test_check_help_names_every_check_only_takes_and_the_exit_statuses() -> None:
    out = gpuprobe("check", "--help")
    assert out.returncode == 0
    listing = out.stdout.split("checks (--only takes them, comma-separated;", 1)[1]
    names = listing.split("):\n", 1)[1].split("\n  (", 1)[0]
    assert [n.strip() for n in names.replace("\n", " ").split(",")] == list(CHECKS)
    assert f"({' and '.join(sorted(active(CHECKS)))} are active" in out.stdout
    exits = " ".join(out.stdout.split("exit status:", 1)[1].split())
    assert (
        exits == "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst check's status), 64 usage error"
    )
    assert "nccl and storage are active" in gpuprobe("capture", "--help").stdout


def test_a_replayed_snapshot_shows_when_it_was_captured(tmp_path: Path) -> None:
    out = gpuprobe("check", "--snapshot", snapshot("synthetic-gpu-lost"))
    header = out.stdout.splitlines()[1]
    assert header == "node synthetic-gpu-lost  snapshot captured 2026-11-29 21:00:00Z"
    bare = tmp_path / "bare"
    shutil.copytree(snapshot("synthetic-gpu-lost"), bare, symlinks=True)
    (bare / "snapshot.json").unlink()
    out = gpuprobe("check", "--snapshot", str(bare))
    assert out.stdout.splitlines()[1] == "node bare  snapshot, capture time unknown"


def test_a_snapshot_with_a_bad_capture_time_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(snapshot("synthetic-gpu-lost"), bad, symlinks=True)
    meta = json.loads((bad / "snapshot.json").read_text())
    for value in ("yesterday", 1764450000, "2026-11-29T21:00:00"):
        (bad / "snapshot.json").write_text(json.dumps({**meta, "captured_at": value}))
        out = gpuprobe("check", "--snapshot", str(bad))
        assert (out.returncode, out.stdout) == (64, "")
        assert out.stderr == (
            f"gpuprobe: {bad / 'snapshot.json'}: captured_at {value!r} is not an RFC 3339 time "
            "(see gpuprobe check --help)\n"
        )


def test_the_live_header_shows_the_time_of_the_run() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    header = gpuprobe("check", "--only", "driver").stdout.splitlines()[1]
    shown = datetime.strptime(header.split("  ")[1], "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= shown <= datetime.now(UTC)


def on_a_terminal(
    *args: str, no_color: bool, columns: int = 0, status: int = 2, term: str = "xterm-256color"
) -> str:
    """What `gpuprobe` prints when its stdout is a terminal (a pseudo-terminal here, of
    `columns` columns when given, of type `term`), read while it runs (a full terminal would
    block it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = term
    if no_color:
        env["NO_COLOR"] = "1"
    leader, follower = pty.openpty()
    if columns:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    chunks = []
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpuprobe", *args], stdout=follower, stderr=stderr, env=env
            )
            os.close(follower)
            follower = -1
            try:
                while chunk := os.read(leader, 65536):
                    chunks.append(chunk)
            except OSError:  # EIO: the terminal's other side is closed and drained
                pass
            proc.wait(timeout=60)
        finally:
            os.close(leader)
            if follower != -1:
                os.close(follower)
        stderr.seek(0)
        assert proc.returncode == status, stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_colour_only_on_a_terminal_and_never_with_no_color() -> None:
    lost = snapshot("synthetic-gpu-lost")
    coloured = on_a_terminal("check", "--snapshot", lost, no_color=False)
    assert coloured.splitlines()[0].startswith("\033[31mCRITICAL\033[0m  first: ")
    assert "\033[32mOK      \033[0m  driver, mig" in coloured  # the checks that passed, green
    plain = on_a_terminal("check", "--snapshot", lost, no_color=True)
    assert "\033[" not in plain
    assert plain.splitlines()[0].startswith("CRITICAL  first: ")
    # A terminal that cannot show escape sequences says so with TERM=dumb (Emacs' shell,
    # some CI consoles): no colour there either, and the same text.
    dumb = on_a_terminal("check", "--snapshot", lost, no_color=False, term="dumb")
    assert dumb == plain


def test_audit_colour_follows_the_same_rules() -> None:
    dead = "127.0.0.1:9"  # the discard port: nothing listens on loopback there
    args = ("audit", "--targets", dead, "--deadline", "2")
    coloured = on_a_terminal(*args, no_color=False, status=3)
    assert coloured.startswith("cluster \033[35mUNKNOWN\033[0m  1 target: ")
    plain = on_a_terminal(*args, no_color=True, status=3)
    assert plain.startswith("cluster UNKNOWN  1 target: ")
    assert on_a_terminal(*args, no_color=False, status=3, term="dumb") == plain


def test_findings_are_wrapped_to_the_terminal_with_a_hanging_indent() -> None:
    xid = snapshot("synthetic-xid-critical")
    piped = untimed(gpuprobe("check", "--snapshot", xid, env={"COLUMNS": "80"}).stdout)
    wrapped = untimed(on_a_terminal("check", "--snapshot", xid, no_color=True, columns=80))
    assert max(len(line) for line in piped.splitlines()) > 300  # a pipe gets whole lines
    assert max(len(line) for line in wrapped.splitlines()) <= 80
    assert wrapped.split() == piped.split()  # the same words, only the line breaks differ
    lines = wrapped.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" " * 10 + "GPU 2 (0000"))
    end = lines.index("          action: RESET_GPU", start)
    assert end - start > 3
    assert all(line.startswith(" " * 10) and line[10] != " " for line in lines[start:end])
    # --verbose: a check's summary wraps under itself, beside its status and name.
    verbose = on_a_terminal("check", "--verbose", "--snapshot", xid, no_color=True, columns=80)
    lines = verbose.splitlines()
    assert max(len(line) for line in lines) <= 80
    sharing = next(i for i, line in enumerate(lines) if line.startswith("OK        sharing  "))
    assert lines[sharing + 1].startswith(" " * 25) and lines[sharing + 1][25] != " "
    # The colours do not count toward the width.
    coloured = on_a_terminal("check", "--snapshot", xid, no_color=False, columns=80)
    assert untimed(re.sub("\033\\[[0-9;]*m", "", coloured)) == wrapped
    # --json on a terminal is the JSON report, unwrapped.
    report = on_a_terminal("check", "--json", "--snapshot", xid, no_color=True, columns=80)
    assert json.loads(report)["checks"][3]["findings"][0]["message"].startswith("GPU 2 (")


def untimed(text: str) -> str:
    """The report without its check durations (they differ from run to run)."""
    return re.sub(r"\(\d+\.\d\d s\)", "(s)", text)


def test_render_wraps_to_the_width_it_is_given() -> None:
    report = NodeReport(
        "n1",
        datetime(2026, 11, 29, 21, tzinfo=UTC),
        [
            CheckResult(
                "toolkit",
                "containerd 2.0: " + "a very long summary " * 6,
                [
                    Finding(
                        "RUNTIME_MISSING",
                        Severity.CRITICAL,
                        "word " * 30 + "/a/path/that/is/longer/than/the/line/ever/could/be/made",
                        Action.FIX_CONFIG,
                        "file:/etc/containerd/config.toml",
                    )
                ],
            )
        ],
    )
    assert render_report(report, width=60, verbose=True).splitlines() == [
        "CRITICAL  first: FIX_CONFIG for RUNTIME_MISSING on",
        "          file:/etc/containerd/config.toml (toolkit)",
        "node n1  2026-11-29 21:00:00Z",
        "",
        "CRITICAL  RUNTIME_MISSING on",
        "          file:/etc/containerd/config.toml (toolkit)",
        "          word word word word word word word word word word",
        "          word word word word word word word word word word",
        "          word word word word word word word word word word",
        # A word longer than the line breaks inside the hanging indent, not past the edge.
        "          /a/path/that/is/longer/than/the/line/ever/could/be",
        "          /made",
        "          action: FIX_CONFIG",
        "",
        "CRITICAL  toolkit        containerd 2.0: a very long summary",
        "                         a very long summary a very long",
        "                         summary a very long summary a very",
        "                         long summary a very long summary",
        "                         (0.00 s)",  # the duration's figure and unit stay together
    ]
    assert len(render_report(report).splitlines()) == 6
