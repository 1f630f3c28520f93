"""docs/workloads.md: its PromQL parses (promtool) and reads only metrics docs/metrics.md
documents; every strategy it names has a snapshot that shows it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import ROOT, SNAPSHOTS, require_tool

DOC = (ROOT / "docs" / "workloads.md").read_text()


def test_the_promql_parses_and_reads_documented_metrics(tmp_path: Path) -> None:
    block = DOC.split("```promql\n", 1)[1].split("```", 1)[0]
    queries = [q for q in block.splitlines() if q.strip() and not q.startswith("#")]
    assert len(queries) == 8
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n  - name: docs\n    rules:\n"
        + "".join(
            f"      - record: docs:q{i}\n        expr: '{q}'\n" for i, q in enumerate(queries)
        )
    )
    promtool = require_tool("promtool")
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    metrics = (ROOT / "docs" / "metrics.md").read_text()
    for name in set(re.findall(r"gpuprobe_[a-z_]+", block)):
        assert f"`{name}`" in metrics, name


def test_each_strategy_has_its_snapshot() -> None:
    for name in [
        "synthetic-k8s-gpus-by-uuid",
        "synthetic-k8s-gpus-by-index",
        "synthetic-k8s-time-slicing",
        "synthetic-k8s-mig-single",
        "synthetic-k8s-mig-mixed",
        "synthetic-k8s-dra-claims",
        "synthetic-k8s-dra-mig",
    ]:
        assert (SNAPSHOTS / name / "podresources.json").is_file(), name
