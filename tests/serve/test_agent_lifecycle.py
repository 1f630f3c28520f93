"""The agent's stop: streams end, health says NOT_SERVING, a check still running is left
behind, and the temporary data active checks registered is removed. And the /metrics page:
its formats, compression, and that a scrape reads no report data from disk or NVML."""

from __future__ import annotations

import gzip
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gpuprobe import cleanup
from gpuprobe.checks.context import CheckContext
from gpuprobe.client import Client
from gpuprobe.config import Config
from gpuprobe.report import CheckResult
from helpers import config, use_check
from serving import in_process_agent, wait_for


def test_stop_removes_temporary_data_of_a_check_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "storage-test.tmp"
    writing = threading.Event()

    def storage(ctx: CheckContext, cfg: Config) -> CheckResult:
        scratch.write_bytes(b"x" * 4096)
        cleanup.register(str(scratch))
        writing.set()
        time.sleep(60)  # a throughput test that SIGTERM interrupts
        return CheckResult("storage", "done")

    use_check(monkeypatch, "storage", storage)
    # storage is an active check: without jitter its first run starts at once.
    cfg = config(serve={"jitter_fraction": 0})
    with in_process_agent(config=cfg, names=["driver", "storage"], wait=False) as agent:
        assert writing.wait(10)
        assert scratch.exists()
        client = Client(f"127.0.0.1:{agent.grpc_port}")
        watch = client.watch_reports(timeout=30)
        started = time.monotonic()
        agent.stop(grace=0.5)
        took = time.monotonic() - started
        assert not scratch.exists()
        assert cleanup.pending() == []
        assert took < 3
        assert agent.healthz() == (503, "stopping\n")
        # The stream ends (or the connection goes) rather than hanging on.
        with pytest.raises(Exception):  # noqa: B017 - either way the stream must end
            for _ in watch:
                pass
        client.close()


def scrape(port: int, headers: dict[str, str]) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(response.headers), response.read()


def test_metrics_formats_compression_and_that_a_scrape_touches_no_check() -> None:
    with in_process_agent() as agent:
        runs = agent.store.current().runs
        plain_headers, plain = scrape(agent.metrics_port, {})
        assert plain_headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert b"gpuprobe_node_status 0.0\n" in plain
        assert b"process_resident_memory_bytes" in plain
        om_headers, om = scrape(
            agent.metrics_port,
            {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"},
        )
        assert om_headers["Content-Encoding"] == "gzip"
        assert om_headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        text = gzip.decompress(om).decode()
        assert text.endswith("# EOF\n") and text.count("# EOF") == 1
        assert "gpuprobe_node_status 0.0\n" in text
        for _ in range(50):
            scrape(agent.metrics_port, {})
        assert agent.store.current().runs == runs  # scrapes ran no check
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(
                urllib.request.Request(f"http://127.0.0.1:{agent.metrics_port}/metrics", b"x"),
                timeout=5,
            )
        assert err.value.code == 405


def test_metrics_follow_each_report_update() -> None:
    with in_process_agent(allow_unauthenticated=True) as agent:
        _, before = scrape(agent.metrics_port, {})
        assert b'gpuprobe_check_runs_total{check="gpus"} 1.0' in before
        with Client(f"127.0.0.1:{agent.grpc_port}") as client:
            client.run_checks(["gpus"])
        wait_for(
            lambda: (
                b'gpuprobe_check_runs_total{check="gpus"} 2.0' in scrape(agent.metrics_port, {})[1]
            )
        )
