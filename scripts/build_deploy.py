"""Write the generated files of the Kubernetes deployment (daemonset/):

- the Grafana node-health dashboard, built here with grafana-foundation-sdk, to
  daemonset/base/dashboards/gpuprobe-node-health.json;
- each alert's runbook_url in daemonset/base/prometheusrule.yaml: DOCS_URL, then
  `deploy.md#<the alert's name in lower case>` (its section of docs/deploy.md, "Runbooks");
- the alerting rules as a plain Prometheus rules file, taken from the PrometheusRule
  (daemonset/base/prometheusrule.yaml), to
  daemonset/overlays/no-prometheus-operator/gpuprobe.rules.yml;
- the Helm chart's copies of what the base holds (daemonset/chart/files/: the agent's
  configuration, the dashboard, the rules file, the auditor's ClusterRole; a chart cannot read
  files outside its directory), and the chart's README with the table of its values, from
  values.yaml and the descriptions in values.schema.json;
- the schema of the chart's `config` value in values.schema.json, from the agent's own
  configuration classes (gpuprobe.config and each check's section): every key the agent's
  loader knows, with its type, and no other, so `helm template` refuses a misspelt key
  instead of rendering a configuration the agent refuses at start.

Run `python scripts/build_deploy.py` after changing either source; a test fails when the
committed files differ from what this writes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import (
    bargauge,
    dashboard,
    piechart,
    prometheus,
    stat,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent"))
from gpuprobe.checks.registry import sections  # noqa: E402
from gpuprobe.config import Config  # noqa: E402

DASHBOARD = ROOT / "daemonset" / "base" / "dashboards" / "gpuprobe-node-health.json"
PROMETHEUS_RULE = ROOT / "daemonset" / "base" / "prometheusrule.yaml"
RULES_FILE = ROOT / "daemonset" / "overlays" / "no-prometheus-operator" / "gpuprobe.rules.yml"

CHART = ROOT / "daemonset" / "chart"
CHART_FILES = {
    CHART / "files" / "config.yaml": ROOT / "daemonset" / "base" / "config.yaml",
    CHART / "files" / "gpuprobe-node-health.json": DASHBOARD,
    CHART / "files" / "gpuprobe.rules.yml": RULES_FILE,
    CHART / "files" / "auditor-clusterrole.yaml": ROOT
    / "daemonset"
    / "auditor"
    / "clusterrole.yaml",
}
CHART_README = CHART / "README.md"

# Where the alerts' runbooks are read: the base of every runbook_url. An alert in
# Alertmanager, Slack or PagerDuty needs an absolute URL to be clickable, and the docs must be
# served somewhere to have one. gpuprobe has no published home yet, so this is a placeholder
# in a domain reserved for examples (RFC 2606), which no one can mistake for a real page:
# whoever publishes the docs (a Git host's view of docs/, a docs site) sets it here and runs
# this script; a Helm install sets prometheusRule.runbookBaseURL instead.
DOCS_URL = "https://gpuprobe.example/docs/"
RUNBOOK_URL = re.compile(r"^(\s*runbook_url: ).*$", re.MULTILINE)

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster"'
# The agent's series carry no node label of their own: joining gpuprobe_agent_info on the
# target names the node (and filters by the node variable) under any scrape config.
JOIN = (
    " * on(cluster, job, instance) group_left(node) "
    'gpuprobe_agent_info{cluster=~"$cluster", node=~"$node"}'
)
GPU = f'{CLUSTER}, gpu=~"$gpu"'
STATUS_NAMES = {
    "0": ("OK", "green"),
    "1": ("WARNING", "orange"),
    "2": ("CRITICAL", "red"),
    "3": ("UNKNOWN", "purple"),
}


def on_node(expr: str) -> str:
    """`expr` with the node label joined in (and filtered by $cluster and $node)."""
    return f"{expr}{JOIN}"


def query(expr: str, ref: str = "A", legend: str | None = None) -> prometheus.Dataquery:
    """A range query for time series panels."""
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    return q.legend_format(legend) if legend else q


def instant(expr: str, ref: str = "A", legend: str | None = None) -> prometheus.Dataquery:
    """An instant query in table format: a table row per series, labels as columns."""
    return query(expr, ref, legend).instant().format(prom_model.PromQueryFormat.TABLE)


def current(expr: str, ref: str = "A", legend: str | None = None) -> prometheus.Dataquery:
    """An instant query as series (named by `legend`), for stats, pies and gauges."""
    return query(expr, ref, legend).instant().format(prom_model.PromQueryFormat.TIME_SERIES)


def status_mappings() -> list[model.ValueMapping]:
    """0..3 shown as the status names, coloured."""
    return [
        model.ValueMap(
            options={
                value: model.ValueMappingResult(text=name, color=color, index=int(value))
                for value, (name, color) in STATUS_NAMES.items()
            }
        )
    ]


def hide_fields(*names: str) -> model.DataTransformerConfig:
    """A table transformation that hides the join's and Prometheus' bookkeeping columns."""
    return model.DataTransformerConfig(
        id_val="organize",
        options={"excludeByName": {name: True for name in names}},
    )


BOOKKEEPING = ("Time", "__name__", "job", "instance", "cluster", "exported_node", "version")


def table_panel(
    title: str, description: str, *targets: prometheus.Dataquery, keep: tuple[str, ...] = ()
) -> table.Panel:
    """A table of the current state (instant queries), without bookkeeping columns (but those
    named in `keep`)."""
    panel = table.Panel().title(title).description(description).datasource(DATASOURCE)
    for target in targets:
        panel = panel.with_target(target)
    hidden = [name for name in BOOKKEEPING if name not in keep]
    return panel.with_transformation(hide_fields(*hidden)).height(8)


def fixed_color(color: str) -> list[model.DynamicConfigValue]:
    """A fixed colour (for one query's series)."""
    return [model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})]


def overview_panels() -> list[Any]:
    """Cluster overview: nodes by status, agents, failing checks and their findings."""
    by_status = (
        stat.Panel()
        .title("Nodes by status")
        .description("Nodes whose gpuprobe report is OK, WARNING, CRITICAL or UNKNOWN.")
        .datasource(DATASOURCE)
        .no_value("0")
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(8)
        .height(5)
    )
    for value, (name, color) in STATUS_NAMES.items():
        ref = name[0]
        by_status = by_status.with_target(
            current(f"count({on_node(f'gpuprobe_node_status{{{CLUSTER}}}')} == {value})", ref, name)
        ).override_by_query(ref, fixed_color(color))
    agents = (
        stat.Panel()
        .title("Agents and GPUs")
        .description(
            "Agents that report, the GPUs NVML sees on their nodes, and the AMD GPUs amdgpu drives."
        )
        .datasource(DATASOURCE)
        .no_value("0")
        .graph_mode(common.BigValueGraphMode.NONE)
        .with_target(
            current(f'count(gpuprobe_agent_info{{{CLUSTER}, node=~"$node"}})', "A", "agents")
        )
        .with_target(current(f"sum({on_node(f'gpuprobe_gpus{{{CLUSTER}}}')})", "B", "GPUs"))
        .with_target(current(f"sum({on_node(f'gpuprobe_amd_gpus{{{CLUSTER}}}')})", "C", "AMD GPUs"))
        .span(6)
        .height(5)
    )
    report_age = table_panel(
        "Agents",
        "Each agent's version and how long ago its report was last updated (seconds).",
        instant(
            f"time() - gpuprobe_report_timestamp_seconds{{{CLUSTER}}}"
            " * on(cluster, job, instance) group_left(node, version) "
            'gpuprobe_agent_info{cluster=~"$cluster", node=~"$node"}'
        ),
        keep=("version",),
    ).span(10)
    failing = (
        table_panel(
            "Failing checks",
            "Checks whose status is WARNING, CRITICAL or UNKNOWN, by node.",
            instant(f"{on_node(f'gpuprobe_check_status{{{CLUSTER}}}')} >= 1"),
        )
        .mappings(status_mappings())
        .span(8)
    )
    findings = table_panel(
        "Findings and actions",
        "Every active finding: what is wrong, where (resource), and what to do first (action). "
        "`gpuprobe check` on the node prints each finding's message.",
        instant(on_node(f"gpuprobe_finding{{{CLUSTER}}}")),
    ).span(16)
    return [by_status, agents, report_age, failing, findings]


def driver_panels() -> list[Any]:
    """Driver and CUDA versions across the nodes, with skew made to stand out."""
    info = f"gpuprobe_driver_info{{{CLUSTER}}}"
    versions = (
        stat.Panel()
        .title("Driver versions in use")
        .description("Distinct NVIDIA driver versions among the nodes; more than one is skew.")
        .datasource(DATASOURCE)
        .with_target(current(f"count(count by (driver_version) ({on_node(info)}))"))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .thresholds(
            dashboard.ThresholdsConfig()
            .mode(model.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    model.Threshold(value=None, color="green"),
                    model.Threshold(value=2, color="red"),
                ]
            )
        )
        .span(4)
        .height(8)
    )
    per_version = (
        piechart.Panel()
        .title("Nodes per driver and CUDA version")
        .datasource(DATASOURCE)
        .with_target(
            current(
                f"count by (driver_version, cuda_driver_version) ({on_node(info)})",
                legend="{{driver_version}} (CUDA {{cuda_driver_version}})",
            )
        )
        .span(6)
        .height(8)
    )
    off_majority = table_panel(
        "Nodes off the most common driver",
        "Nodes whose driver differs from the version most nodes run: the skew to look at.",
        instant(
            f"{on_node(info)} unless on(driver_version) topk(1, count by (driver_version) ({info}))"
        ),
    ).span(7)
    by_node = table_panel(
        "Driver and CUDA by node",
        "The NVIDIA driver and the CUDA version it supports, per node.",
        instant(on_node(info)),
    ).span(7)
    return [versions, per_version, off_majority, by_node]


def gpu_panels() -> list[Any]:
    """Per-GPU health: temperature, power, utilization, ECC, remapped rows, XID, PCIe."""
    legend = "{{node}} GPU {{gpu}}"

    def series(title: str, metric: str, unit: str) -> timeseries.Panel:
        return (
            timeseries.Panel()
            .title(title)
            .datasource(DATASOURCE)
            .with_target(query(on_node(f"{metric}{{{GPU}}}"), legend=legend))
            .unit(unit)
            .span(8)
            .height(8)
        )

    remap_state = (
        f'label_replace(gpuprobe_gpu_remapped_rows_pending{{{GPU}}} == 1, "state", '
        '"reset pending", "", "") '
        f'or label_replace(gpuprobe_gpu_remapped_rows_failure{{{GPU}}} == 1, "state", '
        '"remap failed", "", "")'
    )
    xid = f"gpuprobe_gpu_xid_errors_total{{{GPU}}}"
    pcie = (
        bargauge.Panel()
        .title("PCIe link width (lanes)")
        .datasource(DATASOURCE)
        .with_target(current(on_node(f"gpuprobe_gpu_pcie_link_width{{{GPU}}}"), legend=legend))
        .min(0)
        .max(16)
        .span(8)
        .height(8)
    )
    return [
        series("GPU temperature", "gpuprobe_gpu_temperature_celsius", "celsius"),
        series("GPU power draw", "gpuprobe_gpu_power_watts", "watt"),
        series("GPU utilization", "gpuprobe_gpu_utilization_ratio", "percentunit"),
        table_panel(
            "Uncorrected ECC errors",
            "GPUs with uncorrected ECC errors since the driver loaded: drain and reset them. "
            "(Aggregate counts are the GPU's history, errors it has since dealt with.)",
            instant(
                on_node(
                    f"gpuprobe_gpu_ecc_errors_total{{{GPU}, "
                    'error_type="uncorrected", counter="volatile"}'
                )
                + " > 0"
            ),
        ).span(8),
        table_panel(
            "Remapped rows",
            "GPUs with device memory rows remapped, by the kind of error that caused it.",
            instant(f"{on_node(f'gpuprobe_gpu_remapped_rows{{{GPU}}}')} > 0"),
        ).span(8),
        table_panel(
            "Row remap state",
            "GPUs waiting for a reset to activate remapped rows, or whose remap failed.",
            instant(on_node(f"({remap_state})")),
        ).span(8),
        timeseries.Panel()
        .title("XID errors per second")
        .datasource(DATASOURCE)
        .with_target(
            query(
                f"sum by (node, gpu, xid) (rate({xid}[$__rate_interval]){JOIN})",
                legend="{{node}} GPU {{gpu}} XID {{xid}}",
            )
        )
        .unit("short")
        .span(8)
        .height(8),
        table_panel(
            "XIDs since the agent started",
            "XID errors per GPU and XID number (cleared with `gpuprobe clear-xid`).",
            instant(on_node(xid)),
        ).span(8),
        pcie,
        table_panel(
            "Degraded PCIe links",
            "GPUs whose PCIe link runs narrower than the GPU's maximum width.",
            instant(
                on_node(
                    f"(gpuprobe_gpu_pcie_link_width{{{GPU}}} "
                    f"< gpuprobe_gpu_pcie_link_width_max{{{GPU}}})"
                )
            ),
        ).span(8),
    ]


def mig_panels() -> list[Any]:
    """The MIG layout of each GPU."""
    devices = f"gpuprobe_mig_device_info{{{GPU}}}"
    return [
        table_panel(
            "MIG devices",
            "Each MIG device: its GPU, GPU instance, compute instance and profile.",
            instant(on_node(devices)),
        ).span(14),
        table_panel(
            "MIG profiles per GPU",
            "How many MIG devices of each profile every MIG-enabled GPU holds.",
            instant(f"count by (node, gpu, profile) ({on_node(devices)})"),
        ).span(10),
    ]


def link_and_storage_panels() -> list[Any]:
    """Measured node-to-node bandwidth as a peer matrix, and storage throughput."""
    matrix = (
        table_panel(
            "Link bandwidth (peer matrix)",
            "Bandwidth measured from each node (row) to each peer (column) over the chosen "
            "transport, colored by value.",
            instant(
                on_node(
                    f'gpuprobe_peer_bandwidth_bytes_per_second{{{CLUSTER}, transport="$transport"}}'
                ),
            ),
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "peer", "rowField": "node", "valueField": "Value"},
            )
        )
        .unit("Bps")
        .cell_options(common.TableColoredBackgroundCellOptions())
        .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.CONTINUOUS_RD_YL_GR))
        .span(12)
        .height(10)
    )
    storage = (
        timeseries.Panel()
        .title("Storage throughput")
        .description("Sequential write and read throughput of each configured path.")
        .datasource(DATASOURCE)
        .with_target(
            query(
                on_node(f"gpuprobe_storage_throughput_bytes_per_second{{{CLUSTER}}}"),
                legend="{{node}} {{path}} {{op}}",
            )
        )
        .unit("Bps")
        .span(12)
        .height(10)
    )
    return [matrix, storage]


def idle_panels() -> list[Any]:
    """GPUs that sit idle."""
    idle = f"gpuprobe_gpu_idle{{{GPU}}} == 1"
    named = (
        f"({idle}) * on(cluster, job, instance, gpu, uuid) group_left(name) "
        f"gpuprobe_gpu_info{{{GPU}}}"
    )
    return [
        stat.Panel()
        .title("Idle GPUs")
        .description("GPUs with no process and no utilization.")
        .datasource(DATASOURCE)
        .no_value("0")
        .graph_mode(common.BigValueGraphMode.NONE)
        .with_target(current(f"count({on_node(f'({idle})')})"))
        .span(4)
        .height(6),
        table_panel(
            "Idle GPUs by node",
            "Which GPUs sit idle; gpuprobe raises GPU_IDLE once one has been idle longer than "
            "gpus.idle_window_seconds.",
            instant(on_node(f"({named})")),
        )
        .span(20)
        .height(6),
    ]


def allocation_panels() -> list[Any]:
    """Who holds the GPUs, and how much of what they hold sits idle (the workloads check)."""
    idle = f"rate(gpuprobe_gpu_idle_allocated_seconds_total{{{GPU}}}[$__rate_interval])"
    allocated = f"rate(gpuprobe_gpu_allocated_seconds_total{{{GPU}}}[$__rate_interval])"
    return [
        timeseries.Panel()
        .title("Idle allocated GPUs by namespace")
        .description(
            "GPUs held by pods but idle (NVML utilization at or below the idle threshold), "
            "summed by the holders' namespace: GPU-seconds per second, i.e. GPUs. Over a range, "
            "increase(gpuprobe_gpu_idle_allocated_seconds_total[...]) / 3600 is GPU-hours."
        )
        .datasource(DATASOURCE)
        .with_target(query(f"sum by (namespace) ({on_node(idle)})", legend="{{namespace}}"))
        .with_target(query(f"sum({on_node(allocated)})", ref="B", legend="allocated (all)"))
        .unit("short")
        .min(0)
        .span(10)
        .height(8),
        table_panel(
            "GPU allocation by node",
            "Each GPU and MIG device the kubelet gave a pod: node, GPU, MIG device, namespace, "
            "pod, container and resource (from the PodResources API).",
            instant(on_node(f"gpuprobe_gpu_allocation_info{{{GPU}}}")),
        ).span(14),
    ]


def variables() -> list[Any]:
    """Data source, cluster, node, GPU, and the transport of the peer matrix."""

    def variable(name: str, label: str, q: str) -> dashboard.QueryVariable:
        return (
            dashboard.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query({"query": q, "refId": name})
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )

    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        variable("cluster", "Cluster", "label_values(gpuprobe_agent_info, cluster)"),
        variable("node", "Node", 'label_values(gpuprobe_agent_info{cluster=~"$cluster"}, node)'),
        variable("gpu", "GPU", 'label_values(gpuprobe_gpu_info{cluster=~"$cluster"}, gpu)'),
        # One transport at a time: the peer matrix has one cell per node and peer.
        variable(
            "transport",
            "Transport",
            "label_values(gpuprobe_peer_bandwidth_bytes_per_second"
            '{cluster=~"$cluster"}, transport)',
        )
        .multi(False)
        .include_all(False),
    ]


def build_dashboard() -> dict[str, Any]:
    """The node-health dashboard as Grafana's JSON model."""
    board = (
        dashboard.Dashboard("GPU node health (gpuprobe)")
        .uid("gpuprobe-node-health")
        .description("gpuprobe's view of every GPU node: status, findings, GPUs, links, storage.")
        .tags(["gpuprobe", "gpu", "kubernetes"])
        .editable()
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
    )
    for variable in variables():
        board = board.with_variable(variable)
    rows: list[tuple[str, list[Any]]] = [
        ("Cluster overview", overview_panels()),
        ("Driver and CUDA", driver_panels()),
        ("GPU health", gpu_panels()),
        ("MIG layout", mig_panels()),
        ("Links and storage", link_and_storage_panels()),
        ("Idle GPUs", idle_panels()),
        ("GPU allocation", allocation_panels()),
    ]
    for title, panels in rows:
        board = board.with_row(dashboard.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    encoded: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def runbook_url(alert: str) -> str:
    """The runbook of an alert: its section of docs/deploy.md, under DOCS_URL."""
    return f"{DOCS_URL}deploy.md#{alert.lower()}"


def prometheus_rule_text() -> str:
    """daemonset/base/prometheusrule.yaml with every runbook_url set from DOCS_URL (the file
    is edited by hand otherwise: its comments stay)."""
    text = PROMETHEUS_RULE.read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", text, re.MULTILINE)
    urls = iter(runbook_url(name) for name in alerts)
    rewritten = RUNBOOK_URL.sub(lambda m: m.group(1) + next(urls), text)
    if len(RUNBOOK_URL.findall(text)) != len(alerts):
        raise SystemExit(f"{PROMETHEUS_RULE}: not one runbook_url per alert")
    return rewritten


def build_rules() -> dict[str, Any]:
    """The PrometheusRule's groups as a plain Prometheus rules file."""
    resource = yaml.safe_load(prometheus_rule_text())
    return {"groups": resource["spec"]["groups"]}


def dashboard_text() -> str:
    """The dashboard file's content."""
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"


def rules_text() -> str:
    """The rules file's content."""
    header = (
        "# Written by scripts/build_deploy.py from daemonset/base/prometheusrule.yaml: edit that\n"
        "# file, then run the script. Load it with Prometheus' rule_files (docs/deploy.md).\n"
    )
    return header + yaml.safe_dump(build_rules(), sort_keys=False, width=10000)


def chart_readme_text() -> str:
    """The chart's README: its head (kept as written, above the marker) and the table of every
    value: its key, type, default and description (values.schema.json)."""
    marker = "<!-- The table below is written by scripts/build_deploy.py: do not edit it. -->"
    head = _read(CHART_README) or f"# gpuprobe Helm chart\n\n{marker}\n"
    head = head.split(marker, 1)[0] + marker + "\n"
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    rows = ["", "| value | type | default | description |", "| --- | --- | --- | --- |"]
    for key, node, default in _schema_leaves(schema, defaults, ""):
        kind = node.get("type", "")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        shown = json.dumps(default, sort_keys=True) if default is not None else ""
        description = " ".join(node.get("description", "").split()).replace("|", "\\|")
        rows.append(f"| `{key}` | {kind} | `{shown}` | {description} |".replace("``", ""))
    return head + "\n".join(rows) + "\n"


def _schema_leaves(
    schema: dict[str, Any], defaults: Any, prefix: str
) -> list[tuple[str, dict[str, Any], Any]]:
    """(dotted key, its schema, its default) of every value the README lists: each property
    that has a description (an object without one is listed through its properties)."""
    found = []
    for name, node in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        default = defaults.get(name) if isinstance(defaults, dict) else None
        if "description" in node:
            found.append((key, node, default))
        if node.get("type") == "object" and "properties" in node:
            found.extend(_schema_leaves(node, default, f"{key}."))
    return found


VALUES_SCHEMA = CHART / "values.schema.json"


def config_schema() -> dict[str, Any]:
    """The JSON Schema of the agent's configuration file: the `Config` dataclass and each
    check's section, key by key, as gpuprobe.config's loader reads them (an unknown key is an
    error there, `additionalProperties: false` here)."""
    hints = typing.get_type_hints(Config)
    properties = {
        f.name: _type_schema(hints[f.name])
        for f in dataclasses.fields(Config)
        if f.metadata.get("key", True)
    }
    properties.update({name: _type_schema(kind) for name, kind in sorted(sections().items())})
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _type_schema(hint: Any) -> dict[str, Any]:
    """One setting's type as JSON Schema (the loader's _convert, type by type)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        members = [_type_schema(a) for a in args if a is not type(None)]
        if type(None) in args:
            members.append({"type": "null"})
        return members[0] if len(members) == 1 else {"anyOf": members}
    if dataclasses.is_dataclass(hint):
        own = typing.get_type_hints(hint)
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                f.name: _type_schema(own[f.name])
                for f in dataclasses.fields(hint)
                if f.metadata.get("key", True)
            },
        }
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    scalar = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in scalar:
        return {"type": scalar[hint]}
    raise TypeError(f"no JSON Schema for the setting type {hint!r}")


def values_schema_text() -> str:
    """values.schema.json with its `config` value's schema written from the agent's classes
    (the rest kept as written)."""
    schema = json.loads(VALUES_SCHEMA.read_text())
    config = schema["properties"]["config"]
    schema["properties"]["config"] = {
        "type": "object",
        "description": config["description"],
        **{k: v for k, v in config_schema().items() if k != "type"},
    }
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write the generated files (or, with --check, say whether they are current)."""
    outputs = {
        DASHBOARD: dashboard_text(),
        PROMETHEUS_RULE: prometheus_rule_text(),
        RULES_FILE: rules_text(),
    }
    for copy, source in CHART_FILES.items():
        outputs[copy] = outputs.get(source) or source.read_text()
    outputs[VALUES_SCHEMA] = values_schema_text()
    outputs[CHART_README] = chart_readme_text()
    if "--check" in argv:
        stale = [str(p.relative_to(ROOT)) for p, text in outputs.items() if _read(p) != text]
        for name in stale:
            print(f"{name} is not what scripts/build_deploy.py writes", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
