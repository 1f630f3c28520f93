"""Every check's record is complete, and the registry lists every check module's record."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing

import pytest

from conftest import ROOT
from gpuprobe import checks
from gpuprobe.checks import registry
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.families import Family
from helpers import node_report

# The modules of the checks package that are not checks: the machinery (attribution names
# the pods of every check's GPU findings), the gpus check's judgement of gpu.health's and
# gpu.imex's facts, the driver and gpus checks' judgement of AMD GPUs, and the pods check's
# table of failure signatures and how much of its data it lists.
MACHINERY = {
    "record",
    "registry",
    "runner",
    "attribution",
    "gpu_health",
    "imex",
    "amd_gpus",
    "pod_signatures",
    "pods_bounds",
}
# Config sections that belong to no one check: how checks run, the daemon, the bandwidth tests
# it serves, and its Kubernetes publisher.
SHARED_SECTIONS = {"checks", "serve", "sections", "bandwidth", "kubernetes"}
CHECKS_DOC = (ROOT / "docs/checks.md").read_text()


def check_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(checks.__path__) if m.name not in MACHINERY)


def test_the_registry_holds_every_check_module_once_in_report_order() -> None:
    modules = {name: importlib.import_module(f"gpuprobe.checks.{name}") for name in check_modules()}
    assert sorted(c.name for c in registry.ORDER) == sorted(modules)
    assert list(registry.CHECKS.values()) == list(registry.ORDER)
    for check in registry.ORDER:
        module = modules[check.name]
        assert module.CHECK is check and check.name == module.NAME
        assert check.run is module.run


@pytest.mark.parametrize("check", registry.ORDER, ids=lambda c: c.name)
def test_a_record_names_its_section_deadline_and_docs(check: Check[object]) -> None:
    hints = typing.get_type_hints(Config)
    if check.name in hints:  # a section Config names: the record must say so
        assert check.section is hints[check.name]
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


def test_every_config_section_belongs_to_a_check() -> None:
    owned = {c.name for c in registry.ORDER if c.section is not None}
    sections = {f.name for f in dataclasses.fields(Config)} - SHARED_SECTIONS
    # A check's own section dataclass (read into Config.sections) belongs to it by its record.
    assert sections | set(registry.sections()) == owned


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
