"""No module imports a module of a higher floor, lazily or not (docs/architecture.md).

Every module of the package sits on one floor (the longest prefix below names it); an import
may reach its own floor or any floor below, never one above. Imports inside functions count
the same as those at the top of a module: a lazy import is still a dependency. Outside
`checks/`, a module imports of the checks only their record, registry and runner (and the
checks' data types).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "agent" / "gpuprobe"

# Top floor first, as docs/architecture.md draws them.
FLOORS: list[tuple[str, list[str]]] = [
    (
        "faces",
        [
            "gpuprobe.__main__",
            "gpuprobe.cli",
            "gpuprobe.serve",
            "gpuprobe.render",
            "gpuprobe.audit.render",
            "gpuprobe.mesh.render",
        ],
    ),
    (
        "orchestration",
        [
            "gpuprobe.audit",
            "gpuprobe.mesh",
            "gpuprobe.capture",
            "gpuprobe.kube",
            "gpuprobe.effects",  # what a report does to the cluster: planners, appliers, loop
            "gpuprobe.daemon",  # `serve`'s orchestration: scheduler, store, event path, pollers
            "gpuprobe.pipeline",  # checks, then post-passes, then sinks: `check` and `serve`
        ],
    ),
    (
        "client library",
        [
            "gpuprobe.client",
            "gpuprobe.wire",
            "gpuprobe.credentials",
            "gpuprobe.unreachable",
            "gpuprobe.targets",
        ],
    ),
    ("checks", ["gpuprobe.checks"]),
    (
        "readers",
        [
            "gpuprobe.gpu",
            "gpuprobe.containers",
            "gpuprobe.workloads",
            "gpuprobe.lifecycle",
        ],
    ),
    ("measure", ["gpuprobe.measure"]),
    ("host", ["gpuprobe.host", "gpuprobe.cleanup"]),
    (
        "model",
        [
            "gpuprobe",  # the package's own __init__ (its version), not its modules
            "gpuprobe.report",
            "gpuprobe.report_view",
            "gpuprobe.causes",  # the findings the text reports show as one cause
            "gpuprobe.config",
            "gpuprobe.errors",
            "gpuprobe.families",
            "gpuprobe.files",  # bounded reads of regular files
            "gpuprobe.printable",  # text from nodes made safe for a terminal
            "gpuprobe.threads",  # thread starts the system may refuse
            "gpuprobe.cores",  # the cores this process may use
            "gpuprobe.v1",  # the generated wire types
            "gpuprobe.kubelet",  # the kubelet's generated PodResources types
        ],
    ),
]


# Generated code: it imports only itself and the protobuf runtime.
GENERATED = ("gpuprobe.v1", "gpuprobe.kubelet")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package but the generated code, by name."""
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: path for name, path in found.items() if not name.startswith(GENERATED)}


def floor(module: str) -> int:
    """The index (0 is the top) of the floor whose longest prefix names `module`."""
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(FLOORS)
        for prefix in prefixes
        if module == prefix or (module.startswith(prefix + ".") and prefix != "gpuprobe")
    ]
    assert matches, f"{module} sits on no floor: add it to FLOORS"
    return max(matches)[1]


def imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere in it (a `from P import m` of a
    module `m` counts as importing `P.m`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "gpuprobe")
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            if node.module.split(".")[0] != "gpuprobe":
                continue
            submodules = {f"{node.module}.{a.name}" for a in node.names} & known
            found.update(submodules or {node.module})
    return found


def upward_imports() -> set[tuple[str, str]]:
    known = set(modules()) | {"gpuprobe.v1.diagnostics_pb2", "gpuprobe.v1.diagnostics_pb2_grpc"}
    return {
        (name, target)
        for name, path in modules().items()
        for target in imports(path, known)
        if floor(target) < floor(name)
    }


def test_no_module_imports_a_higher_floor() -> None:
    assert upward_imports() == set(), "imports that reach up a floor"


def test_every_module_sits_on_a_floor() -> None:
    for name in modules():
        floor(name)
    with pytest.raises(AssertionError, match="sits on no floor"):
        floor("gpuprobe.newcomer")


def test_a_lazy_upward_import_is_found(tmp_path: Path) -> None:
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f() -> None:\n    from gpuprobe.serve import agent\n")
    assert imports(lazy, {"gpuprobe.serve.agent"}) == {"gpuprobe.serve.agent"}
    assert floor("gpuprobe.serve.agent") < floor("gpuprobe.checks.gpus")


# What a module outside `checks/` may import of the checks (docs/architecture.md, "The floors"):
# the record, the registry that lists the records, the runner and what it hands a check (its
# context, the states it keeps), and attribution, the post-pass the pipeline runs over the
# checks' results. Of any other module under `checks/` only the checks' data types: the public
# TypedDicts and dataclasses it defines (its data, its section), never a function, a constant
# or another class.
CHECKS_DOORS = frozenset(
    {
        "gpuprobe.checks",
        "gpuprobe.checks.record",
        "gpuprobe.checks.registry",
        "gpuprobe.checks.runner",
        "gpuprobe.checks.context",
        "gpuprobe.checks.state",
        "gpuprobe.checks.attribution",
    }
)


def data_types(module: str, known: dict[str, Path]) -> set[str]:
    """The data types module `module` of the checks defines, or imports from another module of
    the checks that defines them (a re-export): its public `TypedDict`s (those deriving from
    one too) and dataclasses."""
    tree = ast.parse(known[module].read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in known and node.module != module:
            types = data_types(node.module, known)
            found.update(a.asname or a.name for a in node.names if a.name in types)
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        bases = {ast.unparse(b) for b in node.bases}
        decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        if "dataclass" in decorators or bases & ({"TypedDict"} | found):
            found.add(node.name)
    return found


def reaches_into_checks(path: Path, known: dict[str, Path]) -> set[str]:
    """What `path` imports of the checks beyond their doors and data types: a module
    (`gpuprobe.checks.storage`) or a name of one (`gpuprobe.checks.xid.findings.xid_named`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = {a.name for a in node.names if a.name.startswith("gpuprobe.checks.")}
            found.update(names - CHECKS_DOORS)
        elif isinstance(node, ast.ImportFrom) and node.module == "gpuprobe.checks":
            found.update({f"{node.module}.{a.name}" for a in node.names} - CHECKS_DOORS)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "gpuprobe.checks."
        ):
            assert node.module is not None
            if node.module in CHECKS_DOORS:
                continue
            types = data_types(node.module, known)
            found.update(f"{node.module}.{a.name}" for a in node.names if a.name not in types)
    return found


def test_outside_the_checks_only_their_doors_and_data_types_are_imported() -> None:
    known = modules()
    reached = {
        (name, target)
        for name, path in known.items()
        if not name.startswith("gpuprobe.checks")
        for target in reaches_into_checks(path, known)
    }
    assert reached == set(), "imports that reach into a check past its record"


def test_reaching_into_a_check_is_found(tmp_path: Path) -> None:
    known = modules()
    face = tmp_path / "face.py"
    face.write_text(
        "from gpuprobe.checks import registry, storage\n"
        "from gpuprobe.checks.gpus import GpusData\n"
        "from gpuprobe.checks.xid.settings import XidConfig\n"
        "from gpuprobe.checks.xid.model import XidEntry\n"
        "from gpuprobe.checks.storage import StorageConfig, _PathProbe\n"
        "def f() -> None:\n"
        "    from gpuprobe.checks.xid.findings import xid_named\n"
        "    import gpuprobe.checks.rdma\n"
    )
    assert reaches_into_checks(face, known) == {
        "gpuprobe.checks.storage",
        "gpuprobe.checks.xid.findings.xid_named",
        "gpuprobe.checks.rdma",
        "gpuprobe.checks.storage._PathProbe",
    }


def test_the_floors_are_the_ones_docs_architecture_draws() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"```text\n(.*?)```", doc, re.S)
    assert drawn is not None
    names = [line.split("  ")[0].strip() for line in drawn.group(1).splitlines() if line.strip()]
    assert names == [name for name, _ in FLOORS]
