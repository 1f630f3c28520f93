"""CDI (Container Device Interface) spec files: found, parsed and validated as runtimes do.

The rules follow the CDI reference implementation (cncf-tags/container-device-interface:
`pkg/cdi/spec.go`, `pkg/cdi/spec-dirs.go`, `pkg/parser`, `api/producer/validator-default.go`,
`specs-go/version.go`):

- spec files are the `*.json` and `*.yaml` files directly in each spec directory; a later
  directory has the higher priority (`/var/run/cdi` over `/etc/cdi`); the same device in two
  files of one directory is a conflict that makes the device unusable;
- a spec is decoded strictly (an unknown field is an error);
- `cdiVersion` is one of the released versions and at least what the spec's features need
  (device names starting with a digit and `hostPath` on device nodes need 0.5.0, annotations
  and dots in the class 0.6.0, `intelRdt` and `additionalGids` 0.7.0, `netDevices` 1.1.0);
- `kind` is `vendor/class`: each starts with a letter, ends with a letter or digit, and holds
  only letters, digits, `_`, `-`, `.`;
- device names start and end with a letter or digit and hold letters, digits, `_-.:`; they
  are unique; a device's container edits are not empty; there is at least one device;
- environment entries are `NAME=value`; device nodes have a path, a type in {b, c, u, p} and
  permissions of r, w, m; hooks have a known hook name and a path; mounts have both paths.

`nvidia-ctk cdi generate` writes `nvidia.com/gpu` specs (`cdiVersion: 0.5.0` or later) with one
device per GPU (`"0"`, `"1"`, ..., MIG devices `"0:1"`, or `GPU-<uuid>`) and `all`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.containers.configfile import FileProblem, Invalid, kind_of, parse_json, parse_yaml

SPEC_VERSIONS = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
DEVICE_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
# The fields each object may carry; anything else is an error (the reference decodes strictly).
SPEC_FIELDS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
DEVICE_FIELDS = frozenset({"name", "annotations", "containerEdits"})
EDITS_FIELDS = frozenset(
    {"env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"}
)
DEVICE_NODE_FIELDS = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
MOUNT_FIELDS = frozenset({"hostPath", "containerPath", "options", "type"})
HOOK_FIELDS = frozenset({"hookName", "path", "args", "env", "timeout"})
NET_DEVICE_FIELDS = frozenset({"hostInterfaceName", "name"})
INTEL_RDT_FIELDS = frozenset(
    {
        "closID",
        "l3CacheSchema",
        "memBwSchema",
        "schemata",
        "enableCMT",
        "enableMBM",
        "enableMonitoring",
    }
)


@dataclass(frozen=True)
class ContainerEdits:
    """The edits a spec (or one of its devices) makes to a container, as host paths."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()  # host paths (hostPath, else path)
    mounts: tuple[str, ...] = ()  # host paths
    hooks: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (path, args)


@dataclass(frozen=True)
class CdiDevice:
    """One device a spec defines."""

    name: str
    edits: ContainerEdits


@dataclass
class CdiSpec:
    """A valid CDI spec file."""

    path: str
    version: str
    kind: str
    devices: list[CdiDevice] = field(default_factory=list)
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    @property
    def vendor(self) -> str:
        """The vendor part of the kind (`nvidia.com`)."""
        return self.kind.split("/", 1)[0]

    def all_edits(self) -> list[ContainerEdits]:
        """The spec's own edits and every device's."""
        return [self.edits, *(d.edits for d in self.devices)]


def parse_cdi_spec(path: str, raw: bytes) -> CdiSpec | FileProblem:
    """Parse and validate a spec file (`.json` as JSON, else YAML); any bytes give an answer."""
    doc = parse_json(path, raw) if path.endswith(".json") else parse_yaml(path, raw)
    if isinstance(doc, FileProblem):
        return doc
    try:
        return _spec(path, doc)
    except Invalid as exc:
        return FileProblem(path, f"is invalid: {exc}")


def _spec(path: str, doc: Any) -> CdiSpec:
    doc = _object(doc, "the spec", SPEC_FIELDS)
    version = doc.get("cdiVersion")
    if not isinstance(version, str):
        raise Invalid(f'cdiVersion must be a string like "0.5.0", not {kind_of(version)}')
    if version.removeprefix("v") not in SPEC_VERSIONS:
        raise Invalid(f"cdiVersion {version!r} is not a CDI version")
    kind = doc.get("kind")
    if not isinstance(kind, str):
        raise Invalid(f'kind must be a string like "nvidia.com/gpu", not {kind_of(kind)}')
    _validate_kind(kind)
    _annotations(doc.get("annotations"), "annotations")
    devices_raw = doc.get("devices")
    if not isinstance(devices_raw, list) or not devices_raw:
        raise Invalid("devices must be a non-empty list (a spec defines at least one device)")
    devices, seen = [], set()
    for i, entry in enumerate(devices_raw):
        device = _device(entry, f"devices[{i}]")
        if device.name in seen:
            raise Invalid(f"device {device.name!r} is defined twice")
        seen.add(device.name)
        devices.append(device)
    spec = CdiSpec(
        path, version, kind, devices, _edits(doc.get("containerEdits"), "containerEdits")
    )
    needed = _minimum_version(doc, devices_raw)
    if _version_key(needed) > _version_key(version):
        raise Invalid(f"cdiVersion {version} is too old for what the spec uses: it needs {needed}")
    return spec


def _object(value: Any, where: str, fields: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{where} must be a mapping, not {kind_of(value)}")
    for key in value:
        if key not in fields:
            raise Invalid(f"{where} has an unknown field {key!r}")
    return value


def _name_chars_ok(text: str, extra: str) -> bool:
    return all(c.isascii() and (c.isalnum() or c in extra) for c in text)


def _validate_kind(kind: str) -> None:
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        raise Invalid(f"kind {kind!r} is not vendor/class (like nvidia.com/gpu)")
    for part, label in ((vendor, "vendor"), (cls, "class")):
        if not (part[0].isascii() and part[0].isalpha()):
            raise Invalid(f"kind {kind!r}: the {label} must start with a letter")
        if not (part[-1].isascii() and part[-1].isalnum()) or not _name_chars_ok(part, "_-."):
            raise Invalid(
                f"kind {kind!r}: the {label} may hold only letters, digits, '_', '-' and '.' "
                "and must end with a letter or digit"
            )


def _annotations(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Invalid(f"{where} must map strings to strings")


def _device(entry: Any, where: str) -> CdiDevice:
    entry = _object(entry, where, DEVICE_FIELDS)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise Invalid(f"{where}.name must be a non-empty string, not {kind_of(name)}")
    valid = name[0].isascii() and name[0].isalnum() and name[-1].isascii() and name[-1].isalnum()
    if not valid or not _name_chars_ok(name, "_-.:"):
        raise Invalid(
            f"device name {name!r} may hold only letters, digits, '_', '-', '.' and ':' and "
            "must start and end with a letter or digit"
        )
    _annotations(entry.get("annotations"), f"device {name!r} annotations")
    edits = _edits(entry.get("containerEdits"), f"device {name!r} containerEdits")
    raw_edits = entry.get("containerEdits") or {}
    if not any(raw_edits.get(k) for k in EDITS_FIELDS - {"netDevices"}):
        raise Invalid(f"device {name!r} has empty container edits")
    return CdiDevice(name, edits)


def _edits(value: Any, where: str) -> ContainerEdits:
    if value is None:
        return ContainerEdits()
    value = _object(value, where, EDITS_FIELDS)
    env = _strings(value.get("env"), f"{where}.env")
    for item in env:
        if item.find("=") <= 0:
            raise Invalid(f"{where}.env entry {item!r} is not NAME=value")
    nodes = tuple(
        _device_node(n, f"{where}.deviceNodes[{i}]")
        for i, n in enumerate(_list(value.get("deviceNodes"), f"{where}.deviceNodes"))
    )
    mounts = tuple(
        _mount(m, f"{where}.mounts[{i}]")
        for i, m in enumerate(_list(value.get("mounts"), f"{where}.mounts"))
    )
    hooks = tuple(
        _hook(h, f"{where}.hooks[{i}]")
        for i, h in enumerate(_list(value.get("hooks"), f"{where}.hooks"))
    )
    for i, net in enumerate(_list(value.get("netDevices"), f"{where}.netDevices")):
        net = _object(net, f"{where}.netDevices[{i}]", NET_DEVICE_FIELDS)
        for key in NET_DEVICE_FIELDS:
            if not isinstance(net.get(key), str) or not net[key]:
                raise Invalid(f"{where}.netDevices[{i}].{key} must be a non-empty string")
    gids = value.get("additionalGids")
    if gids is not None and not (
        isinstance(gids, list) and all(_is_int(g) and g >= 0 for g in gids)
    ):
        raise Invalid(f"{where}.additionalGids must be a list of group ids")
    if value.get("intelRdt") is not None:
        _object(value["intelRdt"], f"{where}.intelRdt", INTEL_RDT_FIELDS)
    return ContainerEdits(env=tuple(env), device_nodes=nodes, mounts=mounts, hooks=hooks)


def _device_node(value: Any, where: str) -> str:
    value = _object(value, where, DEVICE_NODE_FIELDS)
    path = value.get("path")
    if not isinstance(path, str) or not path:
        raise Invalid(f"{where}.path must be a non-empty string")
    host_path = value.get("hostPath")
    if host_path is not None and not isinstance(host_path, str):
        raise Invalid(f"{where}.hostPath must be a string")
    node_type = value.get("type", "")
    if not isinstance(node_type, str) or node_type not in DEVICE_NODE_TYPES:
        raise Invalid(f"device node {path!r} has an invalid type {node_type!r}")
    for key in ("major", "minor", "fileMode", "uid", "gid"):
        number = value.get(key)
        if number is not None and not (_is_int(number) and number >= 0):
            raise Invalid(f"device node {path!r}: {key} must be a whole number")
    permissions = value.get("permissions", "")
    if not isinstance(permissions, str) or any(c not in "rwm" for c in permissions):
        raise Invalid(f"device node {path!r} has invalid permissions {permissions!r}")
    return host_path or path


def _mount(value: Any, where: str) -> str:
    value = _object(value, where, MOUNT_FIELDS)
    for key in ("hostPath", "containerPath"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise Invalid(f"{where}.{key} must be a non-empty string")
    _strings(value.get("options"), f"{where}.options")
    if value.get("type") is not None and not isinstance(value["type"], str):
        raise Invalid(f"{where}.type must be a string")
    return str(value["hostPath"])


def _hook(value: Any, where: str) -> tuple[str, tuple[str, ...]]:
    value = _object(value, where, HOOK_FIELDS)
    name = value.get("hookName")
    if not isinstance(name, str) or name not in HOOK_NAMES:  # a list is not even hashable
        raise Invalid(f"{where}.hookName {name!r} is not an OCI hook name")
    path = value.get("path")
    if not isinstance(path, str) or not path:
        raise Invalid(f"{where}.path must be a non-empty string")
    args = _strings(value.get("args"), f"{where}.args")
    for item in _strings(value.get("env"), f"{where}.env"):
        if item.find("=") <= 0:
            raise Invalid(f"{where}.env entry {item!r} is not NAME=value")
    timeout = value.get("timeout")
    if timeout is not None and not (_is_int(timeout) and timeout > 0):
        raise Invalid(f"{where}.timeout must be a whole number of seconds above 0")
    return path, tuple(args)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Invalid(f"{where} must be a list, not {kind_of(value)}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    items = _list(value, where)
    if not all(isinstance(v, str) for v in items):
        raise Invalid(f"{where} must be a list of strings")
    return items


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.removeprefix("v").split("."))


def _minimum_version(doc: dict[str, Any], devices: list[dict[str, Any]]) -> str:
    """The lowest cdiVersion that has every feature the spec uses (specs-go/version.go)."""
    edits = [doc.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in devices]
    needs = "0.3.0"

    def need(version: str) -> None:
        nonlocal needs
        if _version_key(version) > _version_key(needs):
            needs = version

    if any(e.get("netDevices") for e in edits) or any(
        isinstance(e.get("intelRdt"), dict)
        and ("schemata" in e["intelRdt"] or e["intelRdt"].get("enableMonitoring"))
        for e in edits
    ):
        need("1.1.0")
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        need("0.7.0")
    kind_class = str(doc.get("kind", "")).partition("/")[2]
    if doc.get("annotations") or any(d.get("annotations") for d in devices) or "." in kind_class:
        need("0.6.0")
    if any(str(d.get("name", ""))[:1].isdigit() for d in devices) or any(
        n.get("hostPath") for e in edits for n in e.get("deviceNodes") or []
    ):
        need("0.5.0")
    if any(m.get("type") for e in edits for m in e.get("mounts") or []):
        need("0.4.0")
    return needs
