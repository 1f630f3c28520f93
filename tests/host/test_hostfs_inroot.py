"""HostFS resolves every host path inside its root, as a chroot would: an absolute link
starts again at the root, `..` stops there, link loops end; links that stay inside (sysfs's
relative ones) lead where they lead on the host."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gpuprobe.host.fs import HostFS

SECRET = "agent-secret:$6$not-the-host's\n"


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    """A file of the agent's own filesystem, outside the host's tree."""
    (tmp_path / "agent").mkdir()
    path = tmp_path / "agent/shadow"
    path.write_text(SECRET)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "host/etc").mkdir(parents=True)
    (tmp_path / "host/etc/os-release").write_text("ID=ubuntu\n")
    return tmp_path / "host"


def test_an_absolute_link_is_the_hosts_path_not_the_agents(root: Path, agent_file: Path) -> None:
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/0.log").symlink_to(agent_file)
    fs = HostFS(root)
    with pytest.raises(FileNotFoundError):
        fs.read_text("/var/log/0.log")
    assert fs.try_read_text("/var/log/0.log") is None
    assert not fs.is_file("/var/log/0.log")
    assert fs.exists("/var/log/0.log")  # the link itself is there
    assert fs.readlink("/var/log/0.log") == str(agent_file)
    # The same path inside the root is what the link names on the host.
    inside = root / str(agent_file).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text("the host's own\n")
    assert fs.read_text("/var/log/0.log") == "the host's own\n"


def test_an_absolute_link_to_a_directory_lists_inside(root: Path, agent_file: Path) -> None:
    (root / "logs").symlink_to(agent_file.parent)
    fs = HostFS(root)
    assert fs.listdir("/logs") == []
    assert not fs.is_dir("/logs")
    assert fs.glob("/logs/*") == []
    with pytest.raises(FileNotFoundError):
        fs.read_text("/logs/shadow")


def test_dotdot_stops_at_the_root(root: Path, agent_file: Path) -> None:
    (root / "var/log/pods/a").mkdir(parents=True)
    depth = len(Path(str(agent_file)).parts) + 3
    climb = "../" * depth + str(agent_file).lstrip("/")
    (root / "var/log/pods/a/0.log").symlink_to(climb)
    (root / "var/log/pods/a/1.log").symlink_to("../" * depth + "etc/os-release")
    fs = HostFS(root)
    assert fs.try_read_text("/var/log/pods/a/0.log") is None
    assert fs.read_text("/var/log/pods/a/1.log") == "ID=ubuntu\n"
    assert fs.read_text("/../../../etc/os-release") == "ID=ubuntu\n"
    assert fs.listdir("/..") == ["etc", "var"]


def test_link_loops_end_in_an_error(root: Path) -> None:
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("/a")
    (root / "self").symlink_to(".")
    fs = HostFS(root)
    with pytest.raises(OSError) as raised:
        fs.read_text("/a")
    assert raised.value.errno == errno.ELOOP
    assert fs.try_read_text("/a") is None
    assert not fs.exists("/a/x") and fs.listdir("/a") == []
    assert fs.read_text("/self/self/self/etc/os-release") == "ID=ubuntu\n"


def test_relative_links_inside_still_lead_where_they_lead(root: Path) -> None:
    """sysfs's shape: /sys/bus/pci/devices/<address> -> ../../../devices/<path>, and `..`
    after a link is the parent of its target, as the kernel walks it."""
    device = root / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    device.mkdir(parents=True)
    (device / "aer_dev_fatal").write_text("Undefined 0\nTOTAL_ERR_FATAL 0\n")
    (device.parent / "aer_rootport_total_err_cor").write_text("3\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "sys/bus/pci/devices/0000:16:00.0").symlink_to(
        "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    )
    (root / "etc/alternatives").mkdir()
    (root / "etc/alternatives/release").symlink_to("/etc/os-release")
    fs = HostFS(root)
    address = "/sys/bus/pci/devices/0000:16:00.0"
    assert fs.readlink(address) == "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    assert fs.read_text(f"{address}/aer_dev_fatal").startswith("Undefined 0")
    assert fs.read_text(f"{address}/../aer_rootport_total_err_cor") == "3\n"
    assert fs.listdir(address) == ["aer_dev_fatal"]
    assert fs.is_dir(address) and fs.is_file(f"{address}/aer_dev_fatal")
    assert fs.read_text("/etc/alternatives/release") == "ID=ubuntu\n"


def test_a_snapshot_resolves_inside_its_rootfs(tmp_path: Path, agent_file: Path) -> None:
    rootfs = tmp_path / "snap/rootfs"
    (rootfs / "dev").mkdir(parents=True)
    (rootfs / "dev/nvidia0").symlink_to(agent_file)
    (rootfs / "kubelet.sock").symlink_to(agent_file)
    fs = HostFS(rootfs, snapshot=True)
    assert not fs.is_device("/dev/nvidia0") and not fs.is_socket("/kubelet.sock")
    assert not fs.is_executable("/dev/nvidia0")
    assert fs.try_read_text("/dev/nvidia0") is None


def test_the_machines_own_root_reads_as_the_kernel_does() -> None:
    """`--root /` is the machine itself: procfs's magic links keep working."""
    fs = HostFS("/")
    assert fs.readlink("/proc/self") == str(os.getpid())
    assert fs.read_text("/proc/self/status").startswith("Name:")
