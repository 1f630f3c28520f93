"""Every number in the configuration is finite and in a sensible range, or a one-line usage
error naming the key (NaN spun the scheduler at 100 % CPU, turned the rate limit off; a zero
deadline made every check UNKNOWN) — and the file itself is bounded: regular, at most 1 MiB,
not nested beyond what the parser's stack holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuprobe.checks.registry import sections
from gpuprobe.checks.rules.sections import GPUS, GpusConfig
from gpuprobe.config import MAX_CONFIG_BYTES, load_config
from gpuprobe.errors import ConfigError


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("serve: {interval_seconds: .nan}\n", "serve: interval_seconds: nan is not a finite"),
        ("serve: {calls_per_minute: .nan}\n", "serve: calls_per_minute: nan is not a finite"),
        ("serve: {interval_seconds: .inf}\n", "serve: interval_seconds: inf is not a finite"),
        ("serve: {jitter_fraction: .nan}\n", "serve: jitter_fraction: nan is not a finite"),
        ("serve: {intervals: {xid: -.inf}}\n", "serve: intervals.xid: -inf is not a finite"),
        ("checks: {deadline_seconds: .nan}\n", "checks: deadline_seconds: nan is not a finite"),
        (
            "checks: {deadline_seconds: 0}\n",
            "checks: deadline_seconds: 0 must be above 0 and at most a year (31622400 s)",
        ),
        ("checks: {deadline_seconds: -5}\n", "checks: deadline_seconds: -5 must be above 0"),
        ("checks: {deadlines: {storage: 0}}\n", "checks: deadlines.storage: 0 must be above 0"),
        ("checks: {deadlines: {gpus: 1.0e+9}}\n", "checks: deadlines.gpus: 1e+09 must be above"),
        ("serve: {interval_seconds: 1.0e+12}\n", "serve: interval_seconds: 1e+12 must be above"),
        ("nccl: {min_busbw_gbps: .nan}\n", "nccl: min_busbw_gbps: nan is not a finite number"),
        ("nccl: {min_busbw_gbps: -1}\n", "nccl: min_busbw_gbps: -1.0 must not be negative"),
        ("rdma: {expected_rate_gbps: .inf}\n", "rdma: expected_rate_gbps: inf is not a finite"),
        (
            f"serve: {{interval_seconds: {10**400}}}\n",
            "serve: interval_seconds: 100000000000...(401 digits) is not a finite number",
        ),
        (
            f"gpus: {{expect: {10**400}}}\n",
            "gpus: expect: 100000000000...(401 digits) is beyond any sensible count or size",
        ),
        ("network: {min_speed_mbps: -400000}\n", "network: min_speed_mbps: -400000 must not be"),
        ("serve: {calls_burst: 100000}\n", "serve: calls_burst: 100000 is more than 1000"),
        ("serve: {max_watchers: 100000}\n", "serve: max_watchers: 100000 is more than 256"),
        (f"a: {'1' * 5000}\n", "a number too long to read"),
        ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    ],
)
def test_numbers_out_of_range_name_their_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), sections())
    assert str(exc.value).startswith(f"config {tmp_path / 'gpuprobe.yaml'}: ")
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_sensible_numbers_still_load(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "serve: {interval_seconds: 0.5, calls_per_minute: 1.5e+3, jitter_fraction: 0}\n"
            "checks: {deadline_seconds: 31622400, deadlines: {storage: 600}}\n"
            "nccl: {min_busbw_gbps: 0}\n",
        ),
        sections(),
    )
    assert config.serve.interval_seconds == 0.5
    assert config.serve.calls_per_minute == 1500.0
    assert config.checks.deadline("gpus") == 31622400.0
    assert config.checks.deadlines["storage"] == 600.0


def test_only_a_regular_file_of_bounded_size_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # a reader that opened it would wait for a writer forever
    with pytest.raises(ConfigError, match=r"fifo.yaml: not a regular file \(a FIFO\)$"):
        load_config(str(fifo), sections())
    with pytest.raises(ConfigError, match=r"^config /dev/zero: not a regular file \(a character"):
        load_config("/dev/zero", sections())
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"zero\.yaml: not a regular file"):
        load_config(str(link), sections())
    with pytest.raises(ConfigError, match=r"not a regular file \(a directory\)$"):
        load_config(str(tmp_path), sections())
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match=f"big.yaml: larger than {MAX_CONFIG_BYTES} bytes$"):
        load_config(str(big), sections())


def test_an_integer_must_be_below_2_to_the_53(tmp_path: Path) -> None:
    # docs/configuration.md: "an integer below 2^53"; 2^53 itself was let through.
    config = load_config(write(tmp_path, f"gpus: {{expect: {2**53 - 1}}}\n"), sections())
    assert config.section(GPUS, GpusConfig).expect == 2**53 - 1
    for text, key in [
        (f"gpus: {{expect: {2**53}}}\n", "gpus: expect"),
        (f"network: {{min_speed_mbps: {2**53}}}\n", "network: min_speed_mbps"),
    ]:
        with pytest.raises(ConfigError) as exc:
            load_config(write(tmp_path, text), sections())
        assert str(exc.value) == (
            f"config {tmp_path / 'gpuprobe.yaml'}: {key}: 9007199254740992 is beyond any "
            "sensible count or size"
        )
