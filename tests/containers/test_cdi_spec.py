"""CDI specs parsed and validated as the CDI reference implementation does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SNAPSHOTS
from gpuprobe.containers.cdi import CdiSpec, parse_cdi_spec
from gpuprobe.containers.configfile import FileProblem

GENERATED = (
    SNAPSHOTS / "synthetic-h100-k8s-containerd-healthy/rootfs/var/run/cdi/nvidia.yaml"
).read_bytes()
MINIMAL = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
}


def test_the_spec_nvidia_ctk_generates() -> None:
    spec = parse_cdi_spec("/var/run/cdi/nvidia.yaml", GENERATED)
    assert isinstance(spec, CdiSpec)
    assert (spec.version, spec.kind, spec.vendor) == ("0.5.0", "nvidia.com/gpu", "nvidia.com")
    assert [d.name for d in spec.devices] == ["0", "1", "2", "3", "4", "5", "6", "7", "all"]
    assert spec.devices[8].edits.device_nodes == tuple(f"/dev/nvidia{i}" for i in range(8))
    assert spec.edits.device_nodes == (
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    )
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15" in spec.edits.mounts
    assert spec.edits.hooks[1] == (
        "/usr/bin/nvidia-cdi-hook",
        ("nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=550.54.15"),
    )


def test_json_specs_and_host_paths() -> None:
    doc = dict(MINIMAL)
    doc["devices"] = [
        {
            "name": "GPU-5f1c0000",
            "containerEdits": {
                "deviceNodes": [
                    {"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}
                ]
            },
        }
    ]
    spec = parse_cdi_spec("/etc/cdi/nvidia.json", json.dumps(doc).encode())
    assert isinstance(spec, CdiSpec)
    assert spec.devices[0].edits.device_nodes == ("/run/nvidia/driver/dev/nvidia0",)


def mutated(**changes: object) -> bytes:
    doc = json.loads(json.dumps(MINIMAL))
    for key, value in changes.items():
        doc[key] = value
    return json.dumps(doc).encode()


DEVICE = MINIMAL["devices"][0]  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (mutated(cdiVersion="0.9.0"), "is invalid: cdiVersion '0.9.0' is not a CDI version"),
        (
            mutated(cdiVersion=0.5),
            'is invalid: cdiVersion must be a string like "0.5.0", not a number',
        ),
        (
            mutated(cdiVersion="0.3.0"),
            "is invalid: cdiVersion 0.3.0 is too old for what the spec uses: it needs 0.5.0",
        ),
        (
            mutated(kind="nvidia.com"),
            "is invalid: kind 'nvidia.com' is not vendor/class (like nvidia.com/gpu)",
        ),
        (
            mutated(kind="nvidia.com/gpu-"),
            "is invalid: kind 'nvidia.com/gpu-': the class may hold only letters, digits, "
            "'_', '-' and '.' and must end with a letter or digit",
        ),
        (
            mutated(kind="1vendor/gpu"),
            "is invalid: kind '1vendor/gpu': the vendor must start with a letter",
        ),
        (
            mutated(devices=[]),
            "is invalid: devices must be a non-empty list (a spec defines at least one device)",
        ),
        (mutated(devices=[DEVICE, DEVICE]), "is invalid: device '0' is defined twice"),
        (
            mutated(devices=[{"name": "0", "containerEdits": {}}]),
            "is invalid: device '0' has empty container edits",
        ),
        (
            mutated(devices=[{"name": "gpu/0", "containerEdits": DEVICE["containerEdits"]}]),
            "is invalid: device name 'gpu/0' may hold only letters, digits, '_', '-', '.' "
            "and ':' and must start and end with a letter or digit",
        ),
        (
            mutated(devices=[{"name": 0, "containerEdits": DEVICE["containerEdits"]}]),
            "is invalid: devices[0].name must be a non-empty string, not an integer",
        ),
        (
            mutated(containerEdits={"env": ["NVIDIA_VISIBLE_DEVICES"]}),
            "is invalid: containerEdits.env entry 'NVIDIA_VISIBLE_DEVICES' is not NAME=value",
        ),
        (
            mutated(containerEdits={"hooks": [{"hookName": "prestop", "path": "/bin/x"}]}),
            "is invalid: containerEdits.hooks[0].hookName 'prestop' is not an OCI hook name",
        ),
        (
            mutated(containerEdits={"mounts": [{"hostPath": "/usr/lib/x"}]}),
            "is invalid: containerEdits.mounts[0].containerPath must be a non-empty string",
        ),
        (
            mutated(
                containerEdits={"deviceNodes": [{"path": "/dev/nvidiactl", "permissions": "rwx"}]}
            ),
            "is invalid: device node '/dev/nvidiactl' has invalid permissions 'rwx'",
        ),
        (
            mutated(containerEdits={"deviceNodes": [{"path": "/dev/nvidiactl", "type": "z"}]}),
            "is invalid: device node '/dev/nvidiactl' has an invalid type 'z'",
        ),
        (
            mutated(containerEdits={"mount": []}),
            "is invalid: containerEdits has an unknown field 'mount'",
        ),
        (
            mutated(annotations={"a": "b"}),
            "is invalid: cdiVersion 0.5.0 is too old for what the spec uses: it needs 0.6.0",
        ),
        (
            mutated(containerEdits={"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}),
            "is invalid: cdiVersion 0.5.0 is too old for what the spec uses: it needs 1.1.0",
        ),
        (
            b'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n'
            b"  containerEdits:\n    deviceNodes\n",
            "is invalid: device '0' containerEdits must be a mapping, not a string",
        ),
        (
            b"cdiVersion: 0.5.0\ndevices:\n  - [\n",
            "is not valid YAML: line 4 column 1: expected the node content, but found "
            "'<stream end>'",
        ),
        (b"- a\n", "is invalid: the spec must be a mapping, not a list"),
    ],
)
def test_invalid_specs_say_why(raw: bytes, problem: str) -> None:
    path = "/etc/cdi/x.json" if raw.startswith(b"{") else "/etc/cdi/x.yaml"
    assert parse_cdi_spec(path, raw) == FileProblem(path, problem)


def test_versions_with_a_v_prefix_are_accepted() -> None:
    assert isinstance(parse_cdi_spec("/x.json", mutated(cdiVersion="v0.6.0")), CdiSpec)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_give_a_spec_or_a_problem(raw: bytes) -> None:
    for path in ("/etc/cdi/a.yaml", "/etc/cdi/a.json"):
        assert isinstance(parse_cdi_spec(path, raw), CdiSpec | FileProblem)


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "cdiVersion",
                    "kind",
                    "devices",
                    "name",
                    "containerEdits",
                    "deviceNodes",
                    "path",
                    "hostPath",
                    "mounts",
                    "containerPath",
                    "hooks",
                    "hookName",
                    "env",
                    "args",
                    "annotations",
                    "type",
                    "permissions",
                    "major",
                    "intelRdt",
                    "netDevices",
                    "additionalGids",
                    "options",
                    "timeout",
                ]
            ),
            c,
            max_size=4,
        )
    ),
    max_leaves=16,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_any_json_shape_gives_a_spec_or_a_problem(doc: object) -> None:
    result = parse_cdi_spec("/etc/cdi/a.json", json.dumps(doc).encode())
    assert isinstance(result, CdiSpec | FileProblem)
    if isinstance(result, FileProblem):
        assert "\n" not in result.problem


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"name": st.text(alphabet="ab0:_.-/", min_size=0, max_size=4)},
            optional={"containerEdits": VALUES},
        ),
        max_size=3,
    )
)
def test_mutated_devices_of_a_real_spec(devices: list[dict[str, object]]) -> None:
    result = parse_cdi_spec("/x.json", mutated(devices=devices))
    assert isinstance(result, CdiSpec | FileProblem)
