"""containerd's configuration read as containerd reads it, and held against real containerd."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, require_tool
from gpuprobe.containers.containerd import load_containerd
from gpuprobe.containers.runtime import EngineConfig
from gpuprobe.host.fs import HostFS
from tomldoc import toml_text

FIXTURES = ROOT / "tests" / "fixtures" / "toolkit"
ROOT_CONFIG = "/etc/containerd/config.toml"
NVIDIA_BINARY = "/usr/bin/nvidia-container-runtime"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A host tree under tmp_path/host with `files` at their host paths."""
    root = tmp_path / "host"
    for path, content in files.items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
    return root


def load(
    tmp_path: Path, files: dict[str, str], flavor: str = "containerd", major: int | None = None
) -> EngineConfig:
    root = tree(tmp_path, files)
    return load_containerd(HostFS(root), flavor, ROOT_CONFIG, major)


def binaries(config: EngineConfig) -> dict[str, str | None]:
    return {name: r.binary for name, r in config.runtimes.items()}


V2_DROP_IN = {
    ROOT_CONFIG: fixture("containerd-v2-config.toml"),
    "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v2-99-nvidia.toml"),
}
KUBEADM = {ROOT_CONFIG: fixture("containerd-v2-kubeadm-config.toml")}
V2_KUBEADM_WITH_DROP_IN = {
    ROOT_CONFIG: 'imports = ["/etc/containerd/conf.d/*.toml"]\n'
    + fixture("containerd-v2-kubeadm-config.toml").replace("imports = []\n", ""),
    "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v2-99-nvidia.toml"),
}
V2_LATER_DROP_IN_REDEFINES = {
    **V2_DROP_IN,
    "/etc/containerd/conf.d/zz-registry.toml": (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n'
        'config_path = "/etc/containerd/certs.d"\n'
    ),
}
V2_UNVERSIONED_V1_DROP_IN = {
    ROOT_CONFIG: fixture("containerd-v2-config.toml"),
    "/etc/containerd/conf.d/99-nvidia.toml": (
        "[plugins.cri.containerd.runtimes.nvidia]\n"
        '  runtime_type = "io.containerd.runc.v2"\n'
        "  [plugins.cri.containerd.runtimes.nvidia.options]\n"
        f'    BinaryName = "{NVIDIA_BINARY}"\n'
    ),
}
V1_ROOT_AND_DROP_IN = {
    ROOT_CONFIG: (
        'imports = ["/etc/containerd/conf.d/*.toml"]\n'
        '[plugins.cri.containerd]\n  default_runtime_name = "nvidia"\n'
    ),
    "/etc/containerd/conf.d/99-nvidia.toml": V2_UNVERSIONED_V1_DROP_IN[
        "/etc/containerd/conf.d/99-nvidia.toml"
    ],
}
GPU_OPERATOR = {ROOT_CONFIG: fixture("containerd-v2-gpu-operator-config.toml")}
V1_ROOT_V2_TABLE = {
    ROOT_CONFIG: (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
    )
}
DOCKER = {ROOT_CONFIG: fixture("docker-containerd-config.toml")}
V3_DROP_IN = {
    ROOT_CONFIG: fixture("containerd-v3-config.toml"),
    "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v3-99-nvidia.toml"),
}


def test_nvidia_ctk_v2_drop_in_through_imports(tmp_path: Path) -> None:
    config = load(tmp_path, V2_DROP_IN)
    assert config.version == 2
    assert config.files == [ROOT_CONFIG, "/etc/containerd/conf.d/99-nvidia.toml"]
    assert binaries(config) == {"nvidia": NVIDIA_BINARY}
    assert config.runtimes["nvidia"].defined_in == "/etc/containerd/conf.d/99-nvidia.toml"
    assert config.default_runtime == "nvidia"
    assert config.cdi_enabled is True
    assert config.problems == [] and config.notes == []


def test_v3_merges_the_drop_in_into_the_root_table(tmp_path: Path) -> None:
    config = load(tmp_path, V3_DROP_IN)
    assert config.version == 3
    assert binaries(config) == {"runc": None, "nvidia": NVIDIA_BINARY}
    assert config.effective_default == "runc"
    assert config.cdi_enabled is True
    # the v3 root's io.containerd.grpc.v1.cri table has no runtimes: nothing is ignored
    assert config.notes == []


def test_v2_later_drop_in_replaces_the_cri_table_under_containerd_1(tmp_path: Path) -> None:
    config = load(tmp_path, V2_LATER_DROP_IN_REDEFINES, major=1)
    assert binaries(config) == {}
    assert config.effective_default == "runc"
    assert config.notes == [
        "runtime 'nvidia' of /etc/containerd/conf.d/99-nvidia.toml is dropped: "
        "/etc/containerd/conf.d/zz-registry.toml redefines the CRI plugin's table, and "
        "containerd 1.x keeps only the last file's table"
    ]


def test_v2_later_drop_in_is_merged_under_containerd_2(tmp_path: Path) -> None:
    config = load(tmp_path, V2_LATER_DROP_IN_REDEFINES, major=2)
    assert binaries(config) == {"nvidia": NVIDIA_BINARY}
    assert config.effective_default == "nvidia"
    assert config.cdi_enabled is True
    assert config.notes == []


def test_v2_unknown_containerd_keeps_what_either_rule_keeps(tmp_path: Path) -> None:
    config = load(tmp_path, V2_LATER_DROP_IN_REDEFINES)
    assert binaries(config) == {"nvidia": NVIDIA_BINARY}
    assert config.effective_default == "nvidia"
    assert config.notes == [
        "runtime 'nvidia' of /etc/containerd/conf.d/99-nvidia.toml is kept by containerd 2.x "
        "only: /etc/containerd/conf.d/zz-registry.toml redefines the CRI plugin's table, and "
        "containerd 1.x keeps only the last file's table (config version 2 is read by both)",
        "the default runtime is nvidia with containerd 2.x, runc with containerd 1.x "
        "(only /etc/containerd/conf.d/zz-registry.toml's CRI table)",
    ]


def test_v3_later_drop_in_is_merged_key_by_key(tmp_path: Path) -> None:
    files = {
        **V3_DROP_IN,
        "/etc/containerd/conf.d/zz-nvidia-cgroup.toml": (
            "version = 3\n"
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
            "SystemdCgroup = true\n"
        ),
    }
    config = load(tmp_path, files)
    assert binaries(config) == {"runc": None, "nvidia": NVIDIA_BINARY}
    assert config.runtimes["nvidia"].defined_in == "/etc/containerd/conf.d/zz-nvidia-cgroup.toml"
    assert config.cdi_enabled is True
    assert config.notes == []


def test_v4_names_the_cri_plugin_as_v3(tmp_path: Path) -> None:
    files = {
        ROOT_CONFIG: fixture("containerd-v3-config.toml").replace("version = 3", "version = 4"),
        "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v3-99-nvidia.toml"),
    }
    config = load(tmp_path, files)
    assert config.version == 4 and config.problems == []
    assert binaries(config) == {"runc": None, "nvidia": NVIDIA_BINARY}


def test_a_table_of_another_version_is_ignored_and_said_so(tmp_path: Path) -> None:
    config = load(tmp_path, V1_ROOT_V2_TABLE)
    assert binaries(config) == {}
    assert config.notes == [
        '/etc/containerd/config.toml: plugins."io.containerd.grpc.v1.cri" (config version 2) '
        'is ignored under config version 1, which reads plugins."cri"'
    ]


def test_a_version_1_name_under_version_2_stops_containerd(tmp_path: Path) -> None:
    config = load(tmp_path, V2_UNVERSIONED_V1_DROP_IN)
    assert [(p.path, p.problem) for p in config.problems] == [
        (
            "/etc/containerd/conf.d/99-nvidia.toml",
            "is invalid: plugin key 'cri' is not a plugin URI (io.containerd.<type>.<version>) "
            "as config version 2 needs: containerd will not start",
        )
    ]


def test_docker_containerd_has_cri_disabled(tmp_path: Path) -> None:
    config = load(tmp_path, DOCKER)
    assert config.cri_enabled is False
    assert config.version == 1


def test_drop_in_not_imported_is_noted(tmp_path: Path) -> None:
    files = {
        **KUBEADM,
        "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v2-99-nvidia.toml"),
    }
    config = load(tmp_path, files)
    assert binaries(config) == {"runc": None}
    assert config.notes == [
        "/etc/containerd/conf.d/99-nvidia.toml is not imported by /etc/containerd/config.toml, "
        "so containerd ignores it (the root file needs imports = "
        '["/etc/containerd/conf.d/*.toml"])'
    ]


def test_relative_imports_are_relative_to_the_importing_file(tmp_path: Path) -> None:
    files = {
        ROOT_CONFIG: 'version = 2\nimports = ["extra/nvidia.toml"]\n',
        "/etc/containerd/extra/nvidia.toml": fixture("containerd-v2-99-nvidia.toml"),
    }
    config = load(tmp_path, files)
    assert config.files == [ROOT_CONFIG, "/etc/containerd/extra/nvidia.toml"]
    assert "nvidia" in config.runtimes


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        (
            {ROOT_CONFIG: 'version = 2\nimports = ["/etc/containerd/missing.toml"]\n'},
            (
                "/etc/containerd/missing.toml",
                "is imported but does not exist: containerd will not start",
            ),
        ),
        (
            {
                ROOT_CONFIG: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
                "/etc/containerd/conf.d/99-nvidia.toml": fixture("containerd-v3-99-nvidia.toml"),
            },
            (
                "/etc/containerd/conf.d/99-nvidia.toml",
                "has config version 3, higher than the root file's 2: containerd will not start",
            ),
        ),
        (
            {ROOT_CONFIG: "version = 2\n[plugins\n"},
            (
                ROOT_CONFIG,
                "is not valid TOML: Expected ']' at the end of a table declaration "
                "(at line 2, column 9)",
            ),
        ),
        (
            {ROOT_CONFIG: 'version = 2\nimports = [""]\n'},
            (ROOT_CONFIG, "is invalid: imports names an empty path"),
        ),
        (
            {ROOT_CONFIG: 'version = "2"\n'},
            (
                ROOT_CONFIG,
                "is invalid: version is '2': containerd knows config versions 1 to 4",
            ),
        ),
        (
            {
                ROOT_CONFIG: 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd'
                ".runtimes.nvidia.options]\nBinaryName = 7\n"
            },
            (
                ROOT_CONFIG,
                'is invalid: plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.'
                "options.BinaryName must be a string",
            ),
        ),
    ],
)
def test_problems_name_the_file(
    tmp_path: Path, files: dict[str, str], problem: tuple[str, str]
) -> None:
    config = load(tmp_path, files)
    assert [(p.path, p.problem) for p in config.problems] == [problem]


# Held against containerd itself: `containerd config dump` prints the configuration containerd
# loads (imports merged). Debian's containerd 1.6 reads config versions 1 and 2; the reader is
# told the binary's major version, as `containerd --version` gives it.
REAL_CASES = {
    "v2-drop-in": V2_DROP_IN,
    "kubeadm": KUBEADM,
    "kubeadm-with-drop-in": V2_KUBEADM_WITH_DROP_IN,
    "later-drop-in-redefines": V2_LATER_DROP_IN_REDEFINES,
    "v1-drop-in-under-v2": V2_UNVERSIONED_V1_DROP_IN,
    "v1-root-and-drop-in": V1_ROOT_AND_DROP_IN,
    "gpu-operator": GPU_OPERATOR,
    "v1-root-v2-table": V1_ROOT_V2_TABLE,
}


def containerd_dump(tmp_path: Path, files: dict[str, str]) -> dict[str, object] | None:
    """What real containerd loads from `files` (imports pointed into a scratch copy); None
    when containerd refuses the configuration."""
    binary = require_tool("containerd")
    real = tmp_path / "real"
    for path, content in files.items():
        dest = real / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content.replace('"/etc/containerd/', f'"{real}/etc/containerd/'))
    out = subprocess.run(
        [binary, "--config", str(real / ROOT_CONFIG.lstrip("/")), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return tomllib.loads(out.stdout) if out.returncode == 0 else None


def containerd_major() -> int:
    """The installed containerd's major version ("containerd <module> 1.6.20~ds1 ...")."""
    out = subprocess.run(
        [require_tool("containerd"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(out.stdout.split()[2].lstrip("v").split(".")[0])


@pytest.mark.parametrize("case", sorted(REAL_CASES))
def test_same_runtimes_as_containerd_itself(tmp_path: Path, case: str) -> None:
    files = REAL_CASES[case]
    dump = containerd_dump(tmp_path, files)
    mine = load(tmp_path, files, major=containerd_major())
    refused = [p for p in mine.problems if p.problem.endswith("containerd will not start")]
    assert (dump is None) == bool(refused)
    if dump is None:
        return
    cri = dump["plugins"]["io.containerd.grpc.v1.cri"]  # type: ignore[index]
    runtimes = cri["containerd"]["runtimes"]
    real = {
        name: (entry.get("options") or {}).get("BinaryName") for name, entry in runtimes.items()
    }
    expected = binaries(mine) or {"runc": None}  # no CRI table anywhere: containerd's default runc
    assert {k: v or None for k, v in real.items()} == {k: v or None for k, v in expected.items()}
    assert cri["containerd"]["default_runtime_name"] == mine.effective_default
    if "enable_cdi" in cri:
        assert cri["enable_cdi"] == bool(mine.cdi_enabled)


def test_cri_disabled_as_containerd_says(tmp_path: Path) -> None:
    dump = containerd_dump(tmp_path, DOCKER)
    assert dump is not None and dump["disabled_plugins"] == ["cri"]
    assert load(tmp_path, DOCKER).cri_enabled is False


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(root=st.binary(max_size=300), drop_in=st.binary(max_size=300))
def test_any_bytes_give_a_config_never_an_exception(
    tmp_path: Path, root: bytes, drop_in: bytes
) -> None:
    host = tmp_path / "any"
    (host / "etc/containerd/conf.d").mkdir(parents=True, exist_ok=True)
    (host / "etc/containerd/config.toml").write_bytes(
        b'imports = ["/etc/containerd/conf.d/*.toml"]\n' + root
    )
    (host / "etc/containerd/conf.d/99-nvidia.toml").write_bytes(drop_in)
    config = load_containerd(HostFS(host), "containerd", ROOT_CONFIG)
    assert isinstance(config, EngineConfig)


TOML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "version",
                    "imports",
                    "disabled_plugins",
                    "plugins",
                    "io.containerd.grpc.v1.cri",
                    "io.containerd.cri.v1.runtime",
                    "cri",
                    "containerd",
                    "runtimes",
                    "nvidia",
                    "options",
                    "BinaryName",
                    "default_runtime_name",
                    "enable_cdi",
                    "runtime_type",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=14,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    doc=st.dictionaries(
        st.sampled_from(["version", "plugins", "imports", "disabled_plugins"]),
        TOML_VALUES,
        max_size=4,
    )
)
def test_wrong_types_in_valid_toml_give_problems_not_exceptions(
    tmp_path: Path, doc: dict[str, object]
) -> None:
    host = tmp_path / "typed"
    (host / "etc/containerd").mkdir(parents=True, exist_ok=True)
    (host / "etc/containerd/config.toml").write_text(toml_text(doc))
    config = load_containerd(HostFS(host), "containerd", ROOT_CONFIG)
    assert isinstance(config, EngineConfig)
    assert all(p.path.startswith("/etc/containerd/") for p in config.problems)
