"""netlink.json: replayed links, capture writes them, bad shapes are one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gpuprobe
from gpuprobe.errors import SnapshotError
from gpuprobe.host.netlink import Address, Link, LiveNetlink, load_netlink


def test_round_trip(tmp_path: Path) -> None:
    link = Link(
        3,
        "eth1",
        "UP",
        True,
        9000,
        "02:00:00:00:00:03",
        None,
        (Address("inet", "10.0.0.7", 24),),
        "ether",
    )
    path = tmp_path / "netlink.json"
    path.write_text(json.dumps({"format": 1, "links": [link.to_dict()]}))
    assert load_netlink(str(path)).links() == [link]


def test_absent_means_no_links(tmp_path: Path) -> None:
    assert load_netlink(str(tmp_path / "netlink.json")).links() == []


@pytest.mark.parametrize(
    "content",
    [
        '{"format": 1}',
        '{"format": 2, "links": []}',
        '{"format": 1, "links": [{"name": "x"}]}',
        '{"format": 1, "links": [{"index": 1, "name": "x", "addresses": [{"family": "inet"}]}]}',
        "[",
    ],
)
def test_bad_shapes(tmp_path: Path, content: str) -> None:
    path = tmp_path / "netlink.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=r"netlink\.json"):
        load_netlink(str(path))


def test_live_links_include_loopback() -> None:
    links = {link.name: link for link in LiveNetlink().links()}
    assert links["lo"].link_type == "loopback"
    assert Address("inet", "127.0.0.1", 8) in links["lo"].addresses


def test_capture_writes_netlink_and_replay_reads_it(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    assert gpuprobe("capture", str(target), "--only", "network").returncode == 0
    recorded = json.loads((target / "netlink.json").read_text())
    assert recorded["format"] == 1
    assert "lo" in [link["name"] for link in recorded["links"]]
    live = json.loads((target / "report.json").read_text())["checks"][0]
    replay = gpuprobe("check", "--json", "--only", "network", "--snapshot", str(target)).json()
    assert replay["checks"][0]["data"]["interfaces"] == live["data"]["interfaces"]
