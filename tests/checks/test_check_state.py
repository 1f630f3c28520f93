"""The runner owns what checks keep between runs (issue 36 item 4): a check declares its state
in its record (`keeps`), the runner keeps it (in memory, and in its one state directory for
what survives a restart), and no module under `checks/` keeps state on the host or writes a
state file of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuprobe.checks import gpus, lifecycle, rdma, registry, workloads, xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.runner import CheckRunner, checks_states
from gpuprobe.checks.state import DEFAULT_STATE_DIR, StateDir, StateError
from gpuprobe.config import Config
from gpuprobe.host import live_host, snapshot_host
from helpers import FakeClock, codes, config, snapshot

CHECKS_DIR = Path(registry.__file__).parent
# The runner's own modules: they keep the checks' states and write the state directory.
RUNNER = {"runner.py", "state.py"}
# What writes a file, or replaces or removes one: `open()`, and the file functions of these
# modules (`os.replace`, `json.dump`, `tempfile.mkstemp`, ...).
FILE_WRITERS = {
    "os": {"replace", "rename", "remove", "unlink", "fdopen", "open", "write", "mkdir", "makedirs"},
    "json": {"dump"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile"},
    "shutil": {"copy", "copyfile", "copy2", "move", "rmtree"},
}
IDLE_GPU = "gpu:6:GPU-5f1c0006-8e2b-4c1d-9a7e-000000000006"
WRITER_METHODS = {"write_text", "write_bytes", "unlink", "mkdir", "touch"}


def check_modules() -> list[Path]:
    """Every module under checks/ but the runner's."""
    return [
        p
        for p in sorted(CHECKS_DIR.rglob("*.py"))
        if p.relative_to(CHECKS_DIR).as_posix() not in RUNNER
    ]


def test_no_check_keeps_state_on_the_host_or_writes_a_file() -> None:
    found = []
    for path in check_modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(CHECKS_DIR)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr == "memory":
                found.append(f"{where}: .memory")
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id == "open":
                    found.append(f"{where}: open()")
                if isinstance(fn, ast.Attribute) and (
                    fn.attr in WRITER_METHODS
                    or (
                        isinstance(fn.value, ast.Name)
                        and fn.attr in FILE_WRITERS.get(fn.value.id, set())
                    )
                ):
                    found.append(f"{where}: {fn.attr}()")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if "tempfile" in names or "shutil" in names:
                    found.append(f"{where}: imports a file writer")
    assert found == []


def test_the_holding_test_sees_a_check_that_keeps_state_on_the_host(tmp_path: Path) -> None:
    """The scan above finds what it looks for (so its empty answer means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def run(ctx, config):\n"
        "    ctx.host.memory.of('bad')['x'] = 1\n"
        "    open('/var/lib/gpuprobe/bad.json', 'w').write('{}')\n"
    )
    tree = ast.parse(bad.read_text())
    attrs = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    calls = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    assert "memory" in attrs and "open" in calls


def test_the_checks_that_keep_state_declare_it_and_xid_and_workloads_survive_a_restart() -> None:
    keeping = {name: c.keeps for name, c in registry.CHECKS.items() if c.keeps is not None}
    assert keeping == {
        "gpus": gpus.KEEPS,
        "xid": xid.KEEPS,
        "workloads": workloads.KEEPS,
        "lifecycle": lifecycle.KEEPS,
        "rdma": rdma.KEEPS,
    }
    assert [n for n, k in keeping.items() if k.survives_restart] == ["xid", "workloads"]


def test_the_runner_keeps_a_checks_state_between_runs_and_a_fresh_runner_starts_empty() -> None:
    host = snapshot_host(snapshot("synthetic-gpus-idle"))
    host.clock = clock = FakeClock()
    cfg = config(gpus={"idle_window_seconds": 600})
    runner = CheckRunner(host, cfg, {"gpus": gpus.CHECK})
    (first,) = runner.run(["gpus"])
    assert first.result.findings == []
    clock.advance(601)
    (second,) = runner.run(["gpus"])
    assert codes(second.result) == [("GPU_IDLE", "WARNING", "NONE", IDLE_GPU)]
    assert list(runner.states.of(gpus.KEEPS).idle_since) == [IDLE_GPU.split(":")[2]]
    # A one-shot check (a fresh runner, a restarted agent) has no history: no GPU_IDLE.
    (fresh,) = CheckRunner(host, cfg, {"gpus": gpus.CHECK}).run(["gpus"])
    assert fresh.result.findings == []


def test_the_state_directory_is_the_configured_one_the_live_default_or_none_for_a_replay(
    tmp_path: Path,
) -> None:
    replay = snapshot_host(snapshot("synthetic-xid-critical"))
    assert checks_states(replay, Config(), registry.CHECKS).directory is None
    configured = config(xid={"state_dir": str(tmp_path)})
    assert checks_states(replay, configured, registry.CHECKS).directory == str(tmp_path)
    live = live_host(str(tmp_path))
    assert checks_states(live, Config(), registry.CHECKS).directory == DEFAULT_STATE_DIR
    # Without a check whose state survives a restart, the runner has no directory at all.
    assert checks_states(live, Config(), {"gpus": gpus.CHECK}).directory is None
    assert CheckContext(live).state_dir(gpus.KEEPS, Config()) is None


def test_xid_and_workloads_state_dir_name_the_one_state_directory(tmp_path: Path) -> None:
    """Both settings name the runner's one directory: either alone, or both alike (as the
    shipped config.yaml sets them), is it; two different ones are a one-line error (the
    agent keeps one directory: neither check's files move silently)."""
    replay = snapshot_host(snapshot("synthetic-xid-critical"))
    here, there = str(tmp_path / "here"), str(tmp_path / "there")
    for cfg in (
        config(xid={"state_dir": here}),
        config(workloads={"state_dir": here}),
        config(xid={"state_dir": here}, workloads={"state_dir": here}),
        config(xid={"state_dir": here}, workloads={"state_dir": here + "/"}),
    ):
        assert checks_states(replay, cfg, registry.CHECKS).directory == here
        directory = CheckRunner(replay, cfg, registry.CHECKS).context().state_dir(xid.KEEPS, cfg)
        assert directory == StateDir(here)
    both = config(xid={"state_dir": here}, workloads={"state_dir": there})
    try:
        checks_states(replay, both, registry.CHECKS)
    except StateError as exc:
        assert str(exc) == (
            f"xid.state_dir ({here}) and workloads.state_dir ({there}) name different state "
            "directories: the agent keeps one; set them to the same directory, or set one"
        )
    else:
        raise AssertionError("two state directories were taken for one")
    # A runner without the workloads check keeps the xid check's directory alone.
    assert checks_states(replay, both, {"xid": xid.CHECK}).directory == here


def test_the_state_directory_writes_atomically_and_says_what_is_wrong(tmp_path: Path) -> None:
    directory = StateDir(str(tmp_path))
    directory.save("x.json", "x state", {"b": 1, "a": [2]}, "create it")
    assert (tmp_path / "x.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left
    assert directory.load("x.json", "x state") == {"a": [2], "b": 1}
    assert directory.load("absent.json", "x state") is None
    (tmp_path / "bad.json").write_text("{not json")
    try:
        directory.load("bad.json", "x state")
    except StateError as exc:
        assert (
            str(exc) == f"x state {tmp_path / 'bad.json'}: line 1: Expecting property name "
            "enclosed in double quotes"
        )
    else:
        raise AssertionError("a corrupt state file was read")
    missing = StateDir(str(tmp_path / "absent"))
    try:
        missing.save("x.json", "x state", {}, "create it")
    except StateError as exc:
        assert str(exc) == f"x state directory {tmp_path / 'absent'} does not exist: create it"
    else:
        raise AssertionError("a missing state directory was written")


def test_a_state_file_that_cannot_be_read_is_set_aside_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = StateDir(str(tmp_path))
    (tmp_path / "x.json").write_text("{not json")
    with caplog.at_level("WARNING", logger="gpuprobe.state"):
        said = directory.set_aside("x.json", "x state x.json: line 1: bad")
    first = f"x state x.json: line 1: bad; kept as {tmp_path / 'x.json.bad'}; starting afresh"
    assert said == first
    assert (tmp_path / "x.json.bad").read_text() == "{not json"
    assert not (tmp_path / "x.json").exists()
    # Where it cannot be moved (a directory holds the `.bad` name), it stays and that is said.
    (tmp_path / "y.json").write_text("[")
    (tmp_path / "y.json.bad").mkdir()
    (tmp_path / "y.json.bad" / "keep").write_text("")
    said = directory.set_aside("y.json", "y state")
    assert said == "y state; and could not be kept aside (is a directory); starting afresh"
    assert (tmp_path / "y.json").read_text() == "["
    assert [r.getMessage() for r in caplog.records if r.name == "gpuprobe.state"] == [first, said]
