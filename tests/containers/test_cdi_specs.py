"""The CDI spec directories read on the host (`containers.cdi_specs`): which files are specs,
what each holds, and which of a spec's host paths exist."""

from __future__ import annotations

from pathlib import Path

from gpuprobe.containers.cdi import CdiSpec
from gpuprobe.containers.cdi_specs import present_paths, read_spec_dirs
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.host import snapshot_host

SPEC = """cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia9
containerEdits:
  mounts:
  - hostPath: /usr/lib/libcuda.so.550.54.15
    containerPath: /usr/lib/libcuda.so.550.54.15
  - hostPath: lib/relative.so
    containerPath: /lib/relative.so
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
"""


def test_spec_files_in_directory_order_with_the_ignored_and_the_broken(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc/cdi/nested.yaml").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yml").write_text(SPEC)
    (root / "etc/cdi/README").write_text("not a spec\n")
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi/nvidia.yaml").write_text(SPEC)
    (root / "var/run/cdi/broken.json").write_text('{"kind": "nvidia.com/gpu", ')
    for path in ("dev/nvidia0", "usr/lib/libcuda.so.550.54.15", "usr/bin/nvidia-cdi-hook"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    host = snapshot_host(str(tmp_path))
    found = read_spec_dirs(host, ["/etc/cdi", "/var/run/cdi", "/absent"])
    assert found.ignored == ("/etc/cdi/nvidia.yml",)
    assert [(f.path, f.priority, f.names_nvidia) for f in found.files] == [
        ("/var/run/cdi/broken.json", 1, True),
        ("/var/run/cdi/nvidia.yaml", 1, True),
    ]
    broken, spec = found.files[0].spec, found.files[1].spec
    assert isinstance(broken, FileProblem) and broken.path == "/var/run/cdi/broken.json"
    assert isinstance(spec, CdiSpec) and spec.kind == "nvidia.com/gpu"
    assert present_paths(host, spec) == {
        "/dev/nvidia0",
        "/usr/lib/libcuda.so.550.54.15",
        "/usr/bin/nvidia-cdi-hook",
    }
