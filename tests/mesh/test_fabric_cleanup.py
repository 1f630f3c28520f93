"""The test fabric leaves nothing behind, even when building it fails half-way."""

from __future__ import annotations

import pytest
from pyroute2 import IPRoute

import fabric
from conftest import require_root
from fabric import Fabric


def test_a_build_failing_before_the_veth_moves_leaves_no_link_in_the_root_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_root()
    create = fabric.netns.create
    # The node's namespace is never made: moving its veth end there fails after the pair
    # was created in the root namespace.
    monkeypatch.setattr(
        fabric.netns, "create", lambda name: create(name) if name.startswith("gp-br-") else None
    )
    net = Fabric(1)
    with pytest.raises(OSError), net:
        pass
    with IPRoute() as root:
        assert [name for name in net.veth_names() if root.link_lookup(ifname=name)] == []
    assert net.namespaces_left() == []
