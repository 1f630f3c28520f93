"""docs/audit.md holds: every flag, failure kind, skew field and total is documented, and
the `buf curl | jq` example prints what it says against a real agent."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT, require_tool
from gpuprobe.audit.cluster import build
from gpuprobe.audit.facts import SKEW_FIELDS
from gpuprobe.audit.usage import Usage
from gpuprobe.cli import build_parser
from gpuprobe.unreachable import Failure
from serving import in_process_agent

DOC = (ROOT / "docs" / "audit.md").read_text()


def section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else None]


def test_every_flag_is_in_the_flags_table() -> None:
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    audit = commands.choices["audit"]  # type: ignore[index]
    flags = {o for a in audit._actions for o in a.option_strings if o.startswith("--")}
    documented = set(re.findall(r"^\| `(--[a-z-]+)", section("Flags"), re.M))
    documented |= set(re.findall(r"`(--[a-z-]+) FILE`", section("Flags")))
    assert flags - {"--help"} == documented


def test_every_failure_skew_field_and_total_is_documented() -> None:
    json_section = section("JSON (`--json`)")
    # The tables' first rows are their headers (`failure`, `field`).
    assert re.findall(r"^    \| `([a-z_]+)` \|", json_section, re.M)[1:] == [
        f.value for f in Failure
    ]
    skew, totals_part = json_section.split("- `totals`", 1)
    totals_part, usage_part = totals_part.split("- `usage`", 1)
    assert re.findall(r"^  \| `([a-z_]+)` \|", skew, re.M)[1:] == list(SKEW_FIELDS)
    totals = set()
    for keys in re.findall(r"^  \| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", totals_part, re.M):
        totals |= set(re.findall(r"`([a-z_]+)`", keys))
    assert totals == set(build([]).totals.to_dict())
    usage = set()
    for keys in re.findall(r"^  \| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", usage_part, re.M):
        usage |= set(re.findall(r"`([a-z_]+)`", keys))
    assert usage == set(Usage().to_dict(price=1.0)) - {"since"}


def test_the_buf_curl_and_jq_example() -> None:
    require_tool("buf")
    require_tool("jq")
    block = re.search(r"```sh\n(buf curl .*?)```", section("From another language"), re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    expected = lines[-1].removeprefix("# ")
    script = "\n".join(lines[:-1])
    with in_process_agent("synthetic-remap-pending", node_name="gpu-node-03") as agent:
        script = script.replace("10.42.2.13:50051", f"127.0.0.1:{agent.grpc_port}")
        out = subprocess.run(
            ["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
        )
    assert (out.returncode, out.stdout, out.stderr) == (0, expected + "\n", "")
