"""Every check's record is complete, and the registry lists every check module's record."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import typing
from pathlib import Path

import pytest

from conftest import ROOT
from gpuprobe import checks
from gpuprobe.checks import device_plugin, registry, xid
from gpuprobe.checks.record import Check
from gpuprobe.checks.xid import settings as xid_settings
from gpuprobe.config import Config
from gpuprobe.containers import device_plugin as device_plugin_paths
from gpuprobe.families import Family
from helpers import node_report

# The modules of the checks package that are not checks: the machinery (attribution names
# the pods of every check's GPU findings; state is what the runner keeps for the checks) and
# `rules`, what checks judge by that is no check of its own.
MACHINERY = {"context", "record", "registry", "runner", "state", "attribution", "rules"}
# One folder per GPU vendor: its rules (no check).
VENDOR_FOLDERS = ("nvidia", "amd")
# Config's own sections, which belong to no one check: how checks run, the daemon, the
# bandwidth tests it serves, and its effects on the cluster (and the checks' sections by name).
SHARED_SECTIONS = {"checks", "serve", "sections", "bandwidth", "kubernetes", "remediation"}
# The node conditions the records group their checks into, as docs/kubernetes.md lists them.
DEFAULT_CONDITIONS = {
    "GPUHardwareReady": ("driver", "gpus", "mig", "xid"),
    "GPURuntimeReady": ("toolkit", "cdi", "device_plugin", "sharing", "workloads"),
    "GPUNetworkReady": ("network", "rdma", "nccl"),
    "GPUStorageReady": ("storage",),
}
CHECKS_DOC = (ROOT / "docs/checks.md").read_text()


def check_modules() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.iter_modules(checks.__path__)
        if m.name not in MACHINERY and m.name not in VENDOR_FOLDERS
    )


def test_the_registry_holds_every_check_module_once_in_report_order() -> None:
    modules = {name: importlib.import_module(f"gpuprobe.checks.{name}") for name in check_modules()}
    assert sorted(c.name for c in registry.ORDER) == sorted(modules)
    assert list(registry.CHECKS.values()) == list(registry.ORDER)
    for check in registry.ORDER:
        module = modules[check.name]
        assert module.CHECK is check and check.name == module.NAME
        assert check.run is module.run


def imported(path: Path, package: str) -> set[str]:
    """The gpuprobe modules (and names under them) a module's source imports, absolute."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package up
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {n for n in names if n.startswith("gpuprobe.")}


def check_of(name: str) -> str | None:
    """The check (by its module's name) that a module name is or lies under, if any."""
    for check in registry.ORDER:
        module = importlib.import_module(check.run.__module__).__name__
        top = f"gpuprobe.checks.{module.split('.')[2]}"
        if name == top or name.startswith(top + "."):
            return check.name
    return None


def test_no_check_module_imports_another_check() -> None:
    """A check module is the module (or package) of a record the registry lists; what two
    checks share lives in `checks/rules/` (or below `checks/`), never in another check."""
    reached = []
    for check in registry.ORDER:
        module = importlib.import_module(check.run.__module__)
        top = importlib.import_module(".".join(module.__name__.split(".")[:3]))
        files = [Path(str(top.__file__))]
        package = "gpuprobe.checks"  # a check module's own package
        if files[0].name == "__init__.py":  # a check package (xid): every module in it
            files, package = sorted(files[0].parent.glob("*.py")), top.__name__
        for path in files:
            for name in imported(path, package):
                other = check_of(name)
                if other is not None and other != check.name:
                    reached.append(f"{check.name} ({path.name}) imports {name}")
    assert reached == []


def test_the_import_scan_sees_one_check_importing_another(tmp_path: Path) -> None:
    """The scan finds what it looks for (so its empty answer means something): the pods
    check's import of the workloads check, as it stood before the shared section moved."""
    source = tmp_path / "pods.py"
    source.write_text("from gpuprobe.checks.workloads import NAME as WORKLOADS\n")
    assert imported(source, "gpuprobe.checks") == {
        "gpuprobe.checks.workloads",
        "gpuprobe.checks.workloads.NAME",
    }
    assert check_of("gpuprobe.checks.workloads.NAME") == "workloads"
    relative = tmp_path / "kernel.py"
    relative.write_text("from ..pods import run\n")
    assert check_of("gpuprobe.checks.pods.run") == "pods"
    assert "gpuprobe.checks.pods.run" in imported(relative, "gpuprobe.checks.xid")


@pytest.mark.parametrize("check", registry.ORDER, ids=lambda c: c.name)
def test_a_record_names_its_section_deadline_and_docs(check: Check[object]) -> None:
    if check.section is not None:
        assert dataclasses.is_dataclass(check.section)
        assert check.section.__dataclass_params__.frozen  # type: ignore[attr-defined]
        check.section()  # its defaults are a valid section
    assert check.deadline(Config()) >= Config().checks.deadline_seconds
    told = dataclasses.replace(Config().checks, deadlines={check.name: 1.5})
    assert check.deadline(dataclasses.replace(Config(), checks=told)) == 1.5
    assert f"## Check `{check.name}`" in CHECKS_DOC


def test_the_active_checks_are_the_ones_that_load_the_node() -> None:
    assert registry.active(registry.CHECKS) == {"nccl", "storage"}


def test_each_check_types_its_data_and_its_renderer_takes_that_type() -> None:
    for check in registry.ORDER:
        module = importlib.import_module(f"gpuprobe.checks.{check.name}")
        data_types = [
            value
            for name, value in vars(module).items()
            if name.endswith("Data") and typing.is_typeddict(value)
        ]
        assert len(data_types) == 1, check.name  # one TypedDict names the check's data
        if check.metrics is not None:
            assert typing.get_type_hints(check.metrics)["data"] is data_types[0], check.name


def test_config_holds_no_checks_section_of_its_own() -> None:
    # A check's section is its record's, read into Config.sections under the check's name.
    assert {f.name for f in dataclasses.fields(Config)} == SHARED_SECTIONS
    assert registry.sections() == {c.name: c.section for c in registry.ORDER if c.section}
    assert not SHARED_SECTIONS & set(registry.CHECKS)


def test_the_readers_of_a_checks_section_name_the_check() -> None:
    # The device plugin's paths and the xid settings are read below or beside their check.
    assert device_plugin_paths.SECTION == device_plugin.NAME
    assert device_plugin.CHECK.section is device_plugin_paths.DevicePluginPaths
    assert xid_settings.SECTION == xid.NAME
    assert xid.CHECK.section is xid_settings.XidConfig


def test_the_default_node_conditions_are_the_records_groups() -> None:
    assert registry.conditions() == DEFAULT_CONDITIONS
    grouped = {name for names in DEFAULT_CONDITIONS.values() for name in names}
    assert {c.name for c in registry.ORDER if c.condition is None} == set(registry.CHECKS) - grouped


def test_the_summary_view_keeps_what_each_record_names() -> None:
    keys = registry.summary_keys()
    assert list(keys) == ["driver", "gpus", "mig", "toolkit", "sharing", "workloads", "pods"]
    assert keys["driver"] == {
        "driver_version": None,
        "cuda_driver_version": None,
        "vendors": None,
        "amd": {"amdgpu_version": None, "rocm_version": None},
    }


def test_each_renderer_turns_its_checks_data_into_families() -> None:
    report = node_report("synthetic-h100-8gpu-healthy")
    rendered = {}
    for check in registry.ORDER:
        result = report.check(check.name)
        assert result is not None
        families = check.families(result)
        assert all(isinstance(f, Family) for f in families)
        assert bool(families) == (check.metrics is not None), check.name
        rendered[check.name] = [f.name for f in families]
    assert rendered["driver"] == ["gpuprobe_driver_info"]
    assert rendered["xid"] == ["gpuprobe_gpu_xid_errors"]
    assert rendered["mig"] == ["gpuprobe_mig_device_info"]
    # Nothing configured: the family, without samples.
    assert rendered["storage"] == ["gpuprobe_storage_throughput_bytes_per_second"]
    assert rendered["gpus"][:3] == ["gpuprobe_gpus", "gpuprobe_gpu_info", GPU_TEMPERATURE]


GPU_TEMPERATURE = "gpuprobe_gpu_temperature_celsius"
