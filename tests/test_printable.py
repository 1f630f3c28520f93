"""Text from nodes and agents is shown, never obeyed (issue 40): a node name holding
`ESC]0;...BEL ESC[2J` (retitle the terminal, clear the screen) and a newline that forges a
report line, through every human output (check, audit, mesh, the audit's cluster view); the
JSON keeps the text exact."""

from __future__ import annotations

import json
from dataclasses import replace

from conftest import gpuprobe, snapshot
from gpuprobe.audit.render import render_cluster
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.mesh.render import render_mesh
from gpuprobe.mesh.run import MeshResult
from gpuprobe.mesh.verdict import Link
from gpuprobe.pipeline import run_checks
from gpuprobe.printable import printable
from gpuprobe.render import render_report
from gpuprobe.report import Action, Finding, Severity
from serving import PASSIVE, in_process_agent

# An OSC that retitles the terminal, a CSI that clears it, and a forged line of a report.
HOSTILE = "gpu-7\x1b]0;owned\x07\x1b[2J\nCRITICAL  forged line\r\u202eevil"
SHOWN = "gpu-7\\x1b]0;owned\\x07\\x1b[2J\\nCRITICAL  forged line\\r\\u202eevil"
CONTROLS = ("\x1b", "\x07", "\r", "\u202e")


def harmless(text: str, colour: bool = False) -> None:
    """No control character but the line breaks (and, with colour, the status colours)."""
    for line in text.split("\n"):
        bare = line
        if colour:
            for code in ("\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[35m", "\x1b[0m"):
                bare = bare.replace(code, "")
        assert not any(c in bare for c in CONTROLS), repr(line)
        assert not bare.startswith("CRITICAL  forged"), repr(line)


def test_printable_escapes_every_control_and_keeps_only_our_colours() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("\x1b[31mCRITICAL\x1b[0m \x1b[2J", painted=True) == (
        "\x1b[31mCRITICAL\x1b[0m \\x1b[2J"
    )
    assert printable("\x85\x9b2J\x7f\u2028\u2066") == "\\x85\\x9b2J\\x7f\\u2028\\u2066"
    assert printable("ünïcode, tabs\tand NO-BREAK\u00a0SPACE") == (
        "ünïcode, tabs\\tand NO-BREAK\u00a0SPACE"
    )


def test_check_shows_a_hostile_node_name_and_message_escaped() -> None:
    report = run_checks(
        snapshot_host(snapshot("synthetic-gpu-fallen-off-bus-no-xid")), Config(), PASSIVE
    )
    check = next(c for c in report.checks if c.findings)
    finding = replace(check.findings[0], message=HOSTILE)
    hostile = replace(
        report,
        node=HOSTILE,
        checks=[replace(check, findings=[finding]) if c is check else c for c in report.checks],
    )
    for colour in (False, True):
        for width in (None, 80):
            text = render_report(hostile, colour=colour, width=width)
            harmless(text, colour)
            assert "\\x1b]0;owned\\x07\\x1b[2J" in text
    assert json.loads(hostile.to_json())["node"] == HOSTILE  # JSON stays exact


def test_audit_shows_an_agents_hostile_node_name_escaped() -> None:
    with in_process_agent("synthetic-h100-8gpu-healthy", node_name=HOSTILE) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        text = gpuprobe("audit", "--targets", target, "--deadline", "10").stdout
        raw = gpuprobe("audit", "--targets", target, "--deadline", "10", "--json").stdout
    harmless(text)
    assert SHOWN.split("\\n")[0] in text
    assert json.loads(raw)["nodes"][0]["node"] == HOSTILE


def test_the_cluster_view_and_the_mesh_show_hostile_words_escaped() -> None:
    from gpuprobe.audit.cluster import build_from
    from gpuprobe.audit.view.judge import judge
    from gpuprobe.audit.view.read import ClusterFacts, Source
    from gpuprobe.report import now

    facts = ClusterFacts(version=HOSTILE)
    facts.sources["nodes"] = Source("nodes", "failed", HOSTILE)
    report = replace(build_from([]), view=judge(facts, [], now()))
    for colour in (False, True):
        harmless(render_cluster(report, colour=colour, width=100), colour)
    finding = Finding("LINK_FAILED", Severity.CRITICAL, HOSTILE, Action.CHECK_NETWORK, "node")
    mesh = MeshResult([Link(HOSTILE, "gpu-8", "tcp", None, "FAILED", HOSTILE)], [finding])
    harmless(render_mesh(mesh, width=80))
    harmless(render_mesh(mesh))
