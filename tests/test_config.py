"""The configuration file: every key and type checked, one clear error each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprobe.checks import driver
from gpuprobe.checks.registry import CHECKS, sections
from gpuprobe.checks.rules.sections import GPUS, GpusConfig
from gpuprobe.config import Config, load_config
from gpuprobe.errors import ConfigError


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(text)
    return str(path)


def test_no_file_and_an_empty_file_give_the_defaults(tmp_path: Path) -> None:
    assert load_config(None, sections()) == Config()
    assert load_config(write(tmp_path, ""), sections()) == Config()


def test_a_full_file(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "checks:\n  deadline_seconds: 5\n  deadlines: {storage: 120}\n"
            "driver:\n  min_version: '550.54.15'\n  required_cuda: ['12.4', '13.0']\n"
            "gpus:\n  expect: 8\n",
        ),
        sections(),
    )
    assert CHECKS["storage"].deadline(config) == 120.0
    assert CHECKS["gpus"].deadline(config) == 5.0
    assert config.section(driver.NAME, driver.DriverConfig).min_version == "550.54.15"
    assert config.section(driver.NAME, driver.DriverConfig).required_cuda == ("12.4", "13.0")
    assert config.section(GPUS, GpusConfig).expect == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("drivr: {}\n", "unknown key 'drivr'"),
        (
            "driver: {min_version: 550.54}\n",
            "driver: min_version: expected a string, got a number (quote",
        ),
        ("driver: {min_version: 'abc'}\n", "driver: min_version: 'abc' is not a version"),
        ("driver: {required_cuda: '12.4'}\n", "driver: required_cuda: expected a list"),
        ("gpus: {expect: -1}\n", "gpus: expect: -1 is negative"),
        ("gpus: {expect: true}\n", "gpus: expect: expected an integer, got a boolean"),
        ("gpus: [1]\n", "gpus: expected a mapping, got a list"),
        ("checks: {deadlines: {gpus: fast}}\n", "checks: deadlines.gpus: expected a number"),
        ("- 1\n", "expected a mapping, got a list"),
        # Every condition commented out: refused, never the default groups in silence.
        ("kubernetes:\n  conditions:\n", "kubernetes: conditions: expected a mapping, got nothing"),
        ("a: [\n", "line 2 column 1"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), sections())
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(str(tmp_path / "missing.yaml"), sections())
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        load_config(str(path), sections())


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "serve:\n  interval_seconds: 30\ngpus:\n  expect: 8\nserve:\n  intervals: {xid: 10}\n",
            "line 5 column 1: duplicate key 'serve' (first at line 1)",
        ),
        (
            "checks:\n  deadline_seconds: 5\n  deadline_seconds: 50\n",
            "line 3 column 3: duplicate key 'deadline_seconds' (first at line 2)",
        ),
        (
            "checks: {deadlines: {gpus: 5, gpus: 6}}\n",
            "line 1 column 31: duplicate key 'gpus' (first at line 1)",
        ),
        (
            '{"gpus": {"expect": 8}, "gpus": {"expect": 4}}\n',  # JSON works too
            "line 1 column 25: duplicate key 'gpus' (first at line 1)",
        ),
    ],
    ids=["sections", "keys", "flow", "json"],
)
def test_a_key_given_twice_is_refused_with_its_lines(tmp_path: Path, text: str, where: str) -> None:
    # PyYAML keeps the last silently: the first `serve:` section's settings were lost unseen.
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path, sections())
    assert str(exc.value) == f"config {path}: {where}"


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    text = "kubernetes:\n  <<: {timeout_seconds: 5, events: false}\n  events: true\n"
    config = load_config(write(tmp_path, text), sections())
    assert (config.kubernetes.timeout_seconds, config.kubernetes.events) == (5, True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("serve:\n  intervals: {nope: 5}\n", "serve.intervals: unknown check 'nope'"),
        ("checks:\n  deadlines: {gpu: 5}\n", "checks.deadlines: unknown check 'gpu'"),
    ],
)
@pytest.mark.parametrize("command", ["check", "capture", "serve"])
def test_intervals_and_deadlines_name_known_checks_in_every_command(
    tmp_path: Path, command: str, text: str, message: str
) -> None:
    # `check` accepted what `serve` refused: one validation now serves all.
    from conftest import gpuprobe, snapshot

    config = write(tmp_path, text)
    where = [str(tmp_path / "out")] if command == "capture" else []
    replay = [] if command == "capture" else ["--snapshot", snapshot("kvm-epyc-nogpu")]
    out = gpuprobe(command, *where, *replay, "--config", config)
    assert (out.returncode, out.stdout, out.stderr) == (
        64,
        "",
        f"gpuprobe: {message} (see gpuprobe {command} --help)\n",
    )
