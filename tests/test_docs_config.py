"""docs/configuration.md documents every key the configuration loader accepts, and only those.

The page's YAML examples are the documentation of record: every key the loader accepts (found
by walking `Config`'s own sections and the section of every check's record, so a key or a
check added later must be documented too) appears in one of them at its place, no example
names a key the loader would refuse, and every example loads.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

import yaml

from conftest import ROOT
from gpuprobe.checks.registry import sections
from gpuprobe.config import Config, build

PAGE = ROOT / "docs/configuration.md"
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _section(hint: Any) -> type | None:
    """The dataclass a field's type is (through `X | None`, or of each item of a
    `tuple[X, ...]`, as `xid.policy`'s rules), if it is one."""
    for candidate in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(candidate) and isinstance(candidate, type):
            return candidate
    return None


def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types; for `Config`, the checks' own sections too (each record's
    `section`, read under the check's name)."""
    hints = typing.get_type_hints(cls)
    return {**hints, **sections()} if cls is Config else hints


def accepted(cls: type = Config, prefix: str = "") -> set[str]:
    """Every key the loader accepts, dotted (`rdma.test.gid_index`); a section counts by its
    keys, a mapping setting (`checks.deadlines`) as one key."""
    keys = set()
    hints = typing.get_type_hints(cls)
    if cls is Config:
        for name, kind in sections().items():
            keys |= accepted(kind, f"{prefix}{name}.")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.metadata.get("key", True):
            continue  # not a key of the file (Config.sections: the checks' own sections)
        section = _section(hints[f.name])
        if section is not None:
            keys |= accepted(section, f"{prefix}{f.name}.")
        else:
            keys.add(prefix + f.name)
    return keys


def examples() -> list[dict[str, Any]]:
    """The page's YAML examples."""
    return [yaml.safe_load(block) for block in YAML_BLOCK.findall(PAGE.read_text())]


def documented(example: Any, cls: type = Config, prefix: str = "") -> set[str]:
    """The keys an example sets, dotted, read along the dataclasses (a key the loader does
    not know is kept as written, so that the test names it)."""
    keys: set[str] = set()
    if not isinstance(example, dict):
        return keys
    hints = _hints(cls)
    for key, value in example.items():
        section = _section(hints[key]) if key in hints else None
        items = value if isinstance(value, list) else [value]
        if section is not None and items and all(isinstance(i, dict) for i in items):
            for item in items:
                keys |= documented(item, section, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def test_the_page_has_examples() -> None:
    assert len(examples()) >= 6


def test_every_accepted_key_is_in_an_example() -> None:
    shown = set().union(*(documented(e) for e in examples()))
    assert sorted(accepted() - shown) == []


def test_every_key_in_an_example_is_accepted() -> None:
    shown = set().union(*(documented(e) for e in examples()))
    assert sorted(shown - accepted()) == []


def test_every_example_loads() -> None:
    for example in examples():
        build(Config, example, "docs/configuration.md", sections())


def test_every_checks_section_is_documented() -> None:
    """Each record's section, every one of its keys, is in an example under the check's name."""
    shown = set().union(*(documented(e) for e in examples()))
    for name, kind in sections().items():
        keys = accepted(kind, f"{name}.")
        assert keys and sorted(keys - shown) == [], name


def test_the_walk_finds_nested_and_mapping_keys() -> None:
    keys = accepted()
    assert {"rdma.test.gid_index", "checks.deadlines", "network.fabric_interfaces"} <= keys
    assert "rdma.test" not in keys and "rdma" not in keys
    assert "xid.policy.severity" in keys and "xid.policy" not in keys  # a list of rules
