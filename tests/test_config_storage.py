"""The `storage` section of the configuration, the storage deadline and `--storage-path`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gpuprobe
from gpuprobe.checks.registry import CHECKS, sections
from gpuprobe.checks.storage import NAME, StorageConfig
from gpuprobe.config import Config, load_config
from gpuprobe.errors import ConfigError

MIB = 1024 * 1024


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    s = Config().section(NAME, StorageConfig)
    assert s == StorageConfig(
        paths=(),
        block_size_bytes=MIB,
        size_bytes=1024 * MIB,
        jobs=4,
        time_limit_seconds=60.0,
        min_write_bytes_per_second=None,
        min_read_bytes_per_second=None,
        force=False,
    )


def test_a_full_section(tmp_path: Path) -> None:
    s = load_config(
        write(
            tmp_path,
            "storage:\n  paths: [/scratch, /mnt/datasets]\n  block_size_bytes: 4194304\n"
            "  size_bytes: 4294967296\n  jobs: 8\n  time_limit_seconds: 90\n"
            "  min_write_bytes_per_second: 1.5e9\n  min_read_bytes_per_second: 2000000000\n"
            "  force: true\n",
        ),
        sections(),
    ).section(NAME, StorageConfig)
    assert s.paths == ("/scratch", "/mnt/datasets")
    assert (s.block_size_bytes, s.size_bytes, s.jobs) == (4 * MIB, 4096 * MIB, 8)
    assert (s.time_limit_seconds, s.force) == (90.0, True)
    assert (s.min_write_bytes_per_second, s.min_read_bytes_per_second) == (1.5e9, 2e9)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("storage: {paths: scratch}\n", "storage: paths: expected a list, got a string"),
        ("storage: {paths: [scratch]}\n", "storage: paths: 'scratch' is not an absolute host"),
        ("storage: {block_size_bytes: 1000}\n", "block_size_bytes: 1000 is not a multiple of"),
        ("storage: {block_size_bytes: 134217728}\n", "up to 64 MiB"),
        ("storage: {block_size_bytes: 0}\n", "block_size_bytes: 0 is not a multiple"),
        ("storage: {jobs: 0}\n", "storage: jobs: 0 is not between 1 and 64"),
        ("storage: {jobs: 65}\n", "storage: jobs: 65 is not between 1 and 64"),
        ("storage: {size_bytes: 1048576, jobs: 2}\n", "size_bytes: 1048576 is less than one"),
        ("storage: {time_limit_seconds: 0}\n", "storage: time_limit_seconds: 0.0 is not positive"),
        ("storage: {interval_seconds: 3600}\n", "storage: unknown key 'interval_seconds'"),
        ("storage: {min_read_bytes_per_second: 0}\n", "min_read_bytes_per_second: 0.0 is not"),
        ("storage: {min_write_bytes_per_second: fast}\n", "expected a number, got a string"),
        ("storage: {force: yes please}\n", "storage: force: expected true or false"),
        ("storage: {size: 1}\n", "storage: unknown key 'size'"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), sections())
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_the_storage_check_gets_a_longer_deadline_unless_told(tmp_path: Path) -> None:
    assert CHECKS["storage"].deadline(Config()) == 120.0
    assert CHECKS["gpus"].deadline(Config()) == 10.0
    raised = load_config(write(tmp_path, "checks: {deadline_seconds: 300}\n"), sections())
    assert CHECKS["storage"].deadline(raised) == 300.0
    told = load_config(write(tmp_path, "checks: {deadlines: {storage: 30}}\n"), sections())
    assert CHECKS["storage"].deadline(told) == 30.0


def test_storage_path_flags_add_to_the_configured_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        json.dumps({"storage": {"paths": [str(tmp_path / "a")], "size_bytes": MIB, "jobs": 1}})
    )
    out = gpuprobe(
        "check", "--json", "--only", "storage", "--config", str(cfg),
        "--storage-path", str(tmp_path / "b"), "--storage-path", str(tmp_path / "a"),
    )  # fmt: skip
    paths = out.json()["checks"][0]["data"]["paths"]
    assert [p["path"] for p in paths] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert all(p["measured"] for p in paths)
    assert out.returncode == 0


def test_a_relative_storage_path_is_a_usage_error() -> None:
    out = gpuprobe("check", "--only", "storage", "--storage-path", "scratch")
    assert out.returncode == 64
    assert out.stderr == (
        "gpuprobe: --storage-path: paths: 'scratch' is not an absolute host path "
        "(see gpuprobe check --help)\n"
    )
    assert out.stdout == ""
