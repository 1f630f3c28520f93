"""CRI-O's crio.conf and drop-ins, and the NVIDIA OCI hook."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from gpuprobe.containers.crio import load_crio
from gpuprobe.containers.runtime import EngineConfig
from gpuprobe.host.fs import HostFS
from tomldoc import toml_text

FIXTURES = ROOT / "tests/fixtures/toolkit"


def write(tmp_path: Path, files: dict[str, bytes]) -> HostFS:
    for path, raw in files.items():
        dest = tmp_path / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(raw)
    return HostFS(tmp_path)


def test_drop_in_adds_nvidia_and_makes_it_the_default(tmp_path: Path) -> None:
    fs = write(
        tmp_path,
        {
            "/etc/crio/crio.conf": (FIXTURES / "crio.conf").read_bytes(),
            "/etc/crio/crio.conf.d/99-nvidia.conf": (FIXTURES / "crio-99-nvidia.conf").read_bytes(),
        },
    )
    config = load_crio(fs)
    assert config.files == ["/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.conf"]
    assert {n: r.binary for n, r in config.runtimes.items()} == {
        "crun": "/usr/libexec/crio/crun",
        "runc": "/usr/libexec/crio/runc",
        "nvidia": "/usr/bin/nvidia-container-runtime",
    }
    assert config.runtimes["nvidia"].defined_in == "/etc/crio/crio.conf.d/99-nvidia.conf"
    assert (config.effective_default, config.cdi_enabled) == ("nvidia", True)


def test_later_drop_in_overrides_the_default(tmp_path: Path) -> None:
    fs = write(
        tmp_path,
        {
            "/etc/crio/crio.conf.d/10-a.conf": b'[crio.runtime]\ndefault_runtime = "nvidia"\n',
            "/etc/crio/crio.conf.d/20-b.conf": b'[crio.runtime]\ndefault_runtime = "crun"\n',
        },
    )
    assert load_crio(fs).effective_default == "crun"


def test_nvidia_oci_hook(tmp_path: Path) -> None:
    hook = (
        b'{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-toolkit", '
        b'"args": ["nvidia-container-toolkit", "prestart"]}, "when": {"always": true}, '
        b'"stages": ["prestart"]}'
    )
    fs = write(tmp_path, {"/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": hook})
    assert load_crio(fs).oci_hook == "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    fs = write(
        tmp_path, {"/etc/crio/crio.conf": b"[crio.runtime.runtimes.nvidia]\nruntime_path = 1\n"}
    )
    assert [(p.path, p.problem) for p in load_crio(fs).problems] == [
        (
            "/etc/crio/crio.conf",
            "is invalid: crio.runtime.runtimes.nvidia.runtime_path must be a string",
        )
    ]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(conf=st.binary(max_size=300), drop_in=st.binary(max_size=300), hook=st.binary(max_size=200))
def test_any_bytes_give_a_config(tmp_path: Path, conf: bytes, drop_in: bytes, hook: bytes) -> None:
    fs = write(
        tmp_path,
        {
            "/etc/crio/crio.conf": conf,
            "/etc/crio/crio.conf.d/99-nvidia.conf": drop_in,
            "/etc/containers/oci/hooks.d/nvidia.json": hook,
        },
    )
    assert isinstance(load_crio(fs), EngineConfig)


# CRI-O's own keys, so that generated documents reach the runtime tables with wrong types.
CRIO_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "crio",
                    "runtime",
                    "runtimes",
                    "default_runtime",
                    "nvidia",
                    "crun",
                    "runtime_path",
                    "runtime_type",
                    "runtime_root",
                    "monitor_path",
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
    conf=st.dictionaries(st.sampled_from(["crio", "runtime"]), CRIO_VALUES, max_size=2),
    drop_in=st.dictionaries(st.just("crio"), CRIO_VALUES, max_size=1),
)
def test_wrong_types_in_valid_toml_give_problems_not_exceptions(
    tmp_path: Path, conf: dict[str, object], drop_in: dict[str, object]
) -> None:
    fs = write(
        tmp_path / "typed",
        {
            "/etc/crio/crio.conf": toml_text(conf).encode(),
            "/etc/crio/crio.conf.d/99-nvidia.conf": toml_text(drop_in).encode(),
        },
    )
    config = load_crio(fs)
    assert isinstance(config, EngineConfig)
    assert all(p.path.startswith("/etc/crio/") for p in config.problems)
    # Every file parses as TOML, so each is either read or named with a type problem.
    named = {p.path for p in config.problems}
    assert set(config.files) | named == {
        "/etc/crio/crio.conf",
        "/etc/crio/crio.conf.d/99-nvidia.conf",
    }
    assert all(p.problem.startswith("is invalid: crio") for p in config.problems)
