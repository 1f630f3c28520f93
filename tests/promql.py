"""A real Prometheus for the deployment's tests: Debian's `prometheus` on loopback with a
throw-away config and data directory, scraping real agents every second and evaluating
rules; and the metric names a PromQL expression reads."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conftest import require_tool


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PromQLError(AssertionError):
    """Prometheus refused or failed an expression."""


@dataclass
class Prometheus:
    """A running Prometheus' HTTP API."""

    base: str

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read()
        try:
            body = json.loads(text)
        except ValueError:
            raise PromQLError(f"{params}: not JSON: {text[:200]!r}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            errors = (body.get("errorType"), body.get("error")) if isinstance(body, dict) else body
            raise PromQLError(f"{params}: {errors}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (a scalar answer becomes one sample without labels)."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]  # type: ignore[no-any-return]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts."""
        return self._get("/api/v1/alerts")["alerts"]  # type: ignore[no-any-return]

    def rules(self) -> list[dict[str, Any]]:
        """The loaded rule groups, with each rule's health and last error."""
        return self._get("/api/v1/rules")["groups"]  # type: ignore[no-any-return]

    def metric_names(self) -> set[str]:
        """Every metric name in the TSDB."""
        return set(self._get("/api/v1/label/__name__/values"))

    def ready(self) -> bool:
        """Whether the API answers."""
        try:
            self.query("1")
        except (OSError, PromQLError):
            return False
        return True


@contextmanager
def prometheus(targets: dict[str, int], rules: dict[str, Any]) -> Iterator[Prometheus]:
    """Prometheus scraping job `gpuprobe` at 127.0.0.1:<port> for each node → port, with the
    target label node=<node> (as the ServiceMonitor's relabelling gives), evaluating `rules`
    every second. Stopped and its directory removed on every way out."""
    binary = require_tool("prometheus")
    workdir = Path(tempfile.mkdtemp(prefix="gpuprobe-prom-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(workdir / "rules.yml")],
            "scrape_configs": [
                {
                    "job_name": "gpuprobe",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{port}"], "labels": {"node": node}}
                        for node, port in targets.items()
                    ],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        with (workdir / "prometheus.log").open("wb") as log:
            proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        server = Prometheus(f"http://127.0.0.1:{port}")
        end = time.monotonic() + 60
        while not server.ready():
            assert proc.poll() is None, (workdir / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < end, "Prometheus did not start"
            time.sleep(0.2)
        yield server
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


# Words of PromQL that are not metric names where a name could stand.
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "sum",
    "count",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (strings, matchers, ranges and label lists taken
    out first; a name followed by `(` is a function)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"`[^`]*`", "``", text)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1()", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("("):
            continue
        if match.group(0) not in _KEYWORDS:
            names.add(match.group(0))
    return names
