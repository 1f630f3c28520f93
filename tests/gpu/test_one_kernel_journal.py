"""One kernel journal: `/dev/kmsg` has one reader on a host, made in one place (`Host.kmsg`),
and the ring followed from it in one place (`kernel_sources.followed_kmsg`), which the checks'
rounds and the daemon's event path share (a record is read from the device once); the event
path subscribes by the kinds of event the vendors' parsers register (`gpu.kernel_events`)."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

from conftest import ROOT
from gpuprobe.checks.registry import CHECKS, kernel_kinds
from gpuprobe.config import Config
from gpuprobe.daemon.signals import first_of_kinds
from gpuprobe.gpu import kernel_events, kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.journal.record import LogRecord
from gpuprobe.gpu.kernel_sources import followed_kmsg
from gpuprobe.host import snapshot_host
from gpuprobe.serve.agent import Agent, ServeOptions
from helpers import snapshot

PACKAGE = ROOT / "agent" / "gpuprobe"


def made_in(name: str) -> list[str]:
    """The modules (relative to the package) that call `name(...)`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == name:
                    found.append(str(path.relative_to(PACKAGE)))
    return found


def test_the_kmsg_reader_and_its_followed_ring_are_made_in_one_place_each() -> None:
    assert made_in("KmsgReader") == ["host/__init__.py"]
    assert made_in("KmsgLog") == ["gpu/kernel_sources.py"]


def test_the_journals_and_their_readers_are_made_in_one_place_each() -> None:
    """The kernel journal over /dev/kmsg, the systemd journal's follower and the followed log
    files are each made in one place (kept in host memory); journalctl is run from one module;
    every record is made an entry (its parsers run) by the registry alone, where each source is
    read: the two
    journals and the log files (`items_of`), which the rounds and the event path share."""
    assert made_in("KernelJournal") == ["gpu/kernel_sources.py"]
    assert made_in("JournaldJournal") == ["gpu/kernel_sources.py"]
    assert made_in("LogFiles") == ["gpu/kernel_sources.py"]
    assert made_in("read_kernel") == ["gpu/journal/journald.py"]
    assert sorted(set(made_in("entry_of"))) == [
        "gpu/journal/journal.py",
        "gpu/journal/journald.py",
        "gpu/kernel_events.py",
    ]
    assert sorted(set(made_in("items_of"))) == ["gpu/journal/files.py"]


def test_the_event_path_follows_the_rounds_ring(tmp_path: Path) -> None:
    """The daemon's kernel-log follower holds the host's one followed ring, not its own."""
    host = snapshot_host(snapshot("synthetic-kmsg-journald-only"), "gpu-node-17")
    agent = Agent(host, Config(), ["xid"], ServeOptions(grpc_listen="127.0.0.1:0"))
    try:
        followers = [s for s in agent.signals._sources if s[0] == "kernel-log"]
        assert len(followers) == 1
        assert host.kmsg_reader is not None  # made once, by the ring the follower holds
        assert followed_kmsg(host).reader is host.kmsg_reader
    finally:
        agent.signals.close()


def test_the_event_path_subscribes_by_the_parsers_kinds() -> None:
    """The lines each parser reads bear its kind's mark; the event path keeps no texts of
    its own (it names kinds)."""
    now = datetime(2026, 11, 30, tzinfo=UTC)
    xid = (
        "2026-11-29T09:40:02.511207+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    sxid = (
        "2026-11-29T09:40:02.511207+00:00 gpu-node-17 kernel: nvidia-nvswitch3: SXid "
        "(PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)"
    )
    amd = (
        "2026-11-29T09:40:02.5+00:00 gpu-node-17 kernel: amdgpu 0000:c5:00.0: amdgpu: "
        "GPU reset(3) succeeded!"
    )
    aer_line = (
        "kernel: pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:18:00.0"
    )
    noise = "kernel: mlx5_core 0000:0c:00.0: Port module event: module 0, Cable unplugged"
    assert kernel_log.parse_xid(xid, boot=None, now=now) is not None
    assert kernel_log.parse_sxid(sxid, boot=None, now=now) is not None
    assert faults.parse_fault(amd, boot=None, now=now) is not None
    lines = (xid, sxid, amd, aer_line, noise)
    entries = [kernel_events.entry_of(LogRecord.of_line(line, now)) for line in lines]
    assert [set(e.kinds) for e in entries] == [{"nvrm"}, {"sxid"}, {"amdgpu_fault"}, {"aer"}, set()]
    kinds = kernel_kinds(CHECKS)
    assert kinds == {"xid": {"nvrm", "sxid", "aer", "amdgpu_fault"}}
    assert first_of_kinds(entries, kinds) == {"xid": entries[0]}
    assert [first_of_kinds([e], kinds) for e in entries[1:]] == [
        {"xid": e} for e in entries[1:4]
    ] + [{}]
    # a boot line is an event (the journal's boots) of a kind the xid check does not wake on
    boot = kernel_events.entry_of(LogRecord.of_line("kernel: Linux version 6.8.0-49", now))
    assert boot.kinds == {"boot"} and first_of_kinds([boot], kinds) == {}
    source = ast.parse((PACKAGE / "daemon" / "signals.py").read_text())
    texts = {n.value for n in ast.walk(source) if isinstance(n, ast.Constant)}
    assert not texts & set(kernel_events.EVENTS.values())
