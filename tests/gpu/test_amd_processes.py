"""Which processes hold AMD GPUs open, and which compute on them, read from real
`/proc/<pid>/fd` links in a tree (a snapshot replays such links too:
`synthetic-amd-k8s-workloads`)."""

from __future__ import annotations

from pathlib import Path

from gpuprobe.gpu.amd.processes import DeviceHandles, read_device_handles, render_minor
from gpuprobe.host.fs import HostFS


def fds(root: Path, pid: int, targets: list[str]) -> None:
    directory = root / f"proc/{pid}/fd"
    directory.mkdir(parents=True)
    for n, target in enumerate(targets):
        (directory / str(n)).symlink_to(target)


def test_each_process_holding_a_render_node_or_the_kfd_is_found(tmp_path: Path) -> None:
    fds(tmp_path, 1, ["/dev/null", "socket:[20113]"])
    fds(tmp_path, 4100, ["/dev/null", "/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD136"])
    fds(tmp_path, 4200, ["/dev/dri/renderD144", "/dev/dri/card17"])  # a graphics process
    fds(tmp_path, 4300, ["pipe:[1]", "/dev/kfd"])
    fds(tmp_path, 4400, ["/var/log/syslog", "/dev/dri/renderD12x"])
    (tmp_path / "proc/self").mkdir()
    (tmp_path / "proc/sys").mkdir()
    assert read_device_handles(HostFS(tmp_path)) == [
        DeviceHandles(4100, frozenset({128, 136}), True),
        DeviceHandles(4200, frozenset({144}), False),
        DeviceHandles(4300, frozenset(), True),
    ]


def test_pid_1_without_readable_descriptors_means_none_can_be_read(tmp_path: Path) -> None:
    (tmp_path / "proc/1/fd").mkdir(parents=True)
    fds(tmp_path, 4100, ["/dev/kfd", "/dev/dri/renderD128"])
    assert read_device_handles(HostFS(tmp_path)) is None


def test_a_proc_without_pid_1_tells_nothing(tmp_path: Path) -> None:
    """No pid 1 in view (a container's own PID namespace, a snapshot without a process
    table): the processes are unknown, never "none"."""
    assert read_device_handles(HostFS(tmp_path)) is None
    fds(tmp_path, 4100, ["/dev/kfd", "/dev/dri/renderD128"])
    assert read_device_handles(HostFS(tmp_path)) is None


def test_only_a_process_holding_the_kfd_computes_on_a_render_nodes_gpu() -> None:
    trainer = DeviceHandles(4100, frozenset({128, 136}), True)
    monitor = DeviceHandles(4200, frozenset({128, 136, 144}), False)  # amd-smi's handles
    assert [trainer.computes_on(128), trainer.computes_on(144)] == [True, False]
    assert [monitor.computes_on(m) for m in (128, 136, 144)] == [False] * 3


def test_a_render_nodes_minor_comes_from_its_name() -> None:
    assert render_minor("renderD128") == 128
    assert render_minor("card1") is None
    assert render_minor(None) is None
