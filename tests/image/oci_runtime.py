"""The DaemonSet's pod as an OCI runtime spec: what the kubelet and containerd would hand runc
for the agent's container, derived field by field from the rendered DaemonSet (so the test
that runs the image under runc runs it as the DaemonSet does, and cannot drift from it).

Every field of the pod spec and of the container is either translated or named here as the
scheduler's, the kubelet's or the API's concern; anything else raises `Untranslated`, so a new
setting in daemonset/ fails the tests until it is carried here too.

What it follows (the CRI runtimes' behaviour, containerd and CRI-O alike):
- `command`/`args` replace the image's entrypoint/cmd; the image's environment, then the
  container's (`fieldRef: spec.nodeName` is the node's name);
- `runAsUser`/`runAsGroup`/`supplementalGroups` are the process's uid, gid, additional gids;
- `privileged`: every capability the runtime itself holds (containerd's
  WithAllCurrentCapabilities), no masked or read-only kernel paths, every device allowed by
  the device cgroup, no seccomp filter (Kubernetes: "Privileged containers always run as
  Unconfined"), writable /sys;
- `readOnlyRootFilesystem`: a read-only root; `hostPID`: no PID namespace of its own; the pod's
  network namespace (or the host's, with `hostNetwork`) is the one the caller gives;
- volumes: `hostPath` binds the node's path (DirectoryOrCreate makes it, as the kubelet does),
  recursively (`rbind`), read-only with `readOnly`, and recursively so (`rro`) with
  `recursiveReadOnly: Enabled` or `IfPossible`; `configMap`, `secret`, `projected` and
  `emptyDir` are directories the kubelet fills (here: the rendered ConfigMap's data; an
  optional Secret that does not exist leaves its directory empty; the downward API's
  namespace), bound in;
- `resources.limits` are the cgroup's memory limit and CPU quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The Linux capabilities (linux/capability.h), in number order.
CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
]
# containerd's default set for a container that is not privileged.
DEFAULT_CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]

# Fields that are not the runtime's: the scheduler's, the kubelet's, the API server's.
POD_FIELDS_ELSEWHERE = {
    "serviceAccountName",  # the API's identity; its token is the projected volume
    "automountServiceAccountToken",  # false: the projected volume is the only token
    "priorityClassName",  # scheduling and eviction order
    "enableServiceLinks",  # no Service environment variables: none are added here either
    "terminationGracePeriodSeconds",  # how long the kubelet waits after SIGTERM (the test's too)
    "nodeSelector",
    "affinity",
    "tolerations",
    "dnsPolicy",  # resolv.conf, which the agent does not need to start
}
CONTAINER_FIELDS_ELSEWHERE = {
    "name",
    "image",  # the image under test
    "imagePullPolicy",
    "ports",  # informational in Kubernetes; the probes name them
    "livenessProbe",  # the kubelet's; the test asks what they ask (probes())
    "readinessProbe",
    "startupProbe",
}


class Untranslated(ValueError):
    """A field of the pod that this translation does not carry into the runtime spec."""


@dataclass
class Node:
    """Where the pod runs: the node's root, its name, the network namespace the pod gets, and
    the directory where the kubelet's volumes (configMap, secret, projected, emptyDir) live."""

    root: Path
    name: str
    netns: Path
    volumes: Path
    namespace: str = "gpuprobe"
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    # hostPath directories this translation made (DirectoryOrCreate), for the caller to remove
    created: list[Path] = field(default_factory=list)


def container_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (container,) = [c for c in pod["containers"] if c["name"] == name]
    return container


def check_fields(what: str, found: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(found) - known)
    if unknown:
        raise Untranslated(f"{what}: {', '.join(unknown)} not carried into the runtime spec")


def process(pod: dict[str, Any], container: dict[str, Any], image: dict[str, Any],
            node: Node) -> dict[str, Any]:  # fmt: skip
    """The process: arguments, environment, user, capabilities."""
    if "command" in container:
        entrypoint, args = container["command"], container.get("args", [])
    else:
        entrypoint = image.get("Entrypoint") or []
        args = container.get("args", image.get("Cmd") or [])
    env = dict(e.split("=", 1) for e in image.get("Env", []))
    for item in container.get("env", []):
        check_fields("env", item, {"name", "value", "valueFrom"})
        if "valueFrom" in item:
            if item["valueFrom"] != {"fieldRef": {"fieldPath": "spec.nodeName"}}:
                raise Untranslated(f"env {item['name']}: {item['valueFrom']}")
            env[item["name"]] = node.name
        else:
            env[item["name"]] = item.get("value", "")
    env.setdefault("HOSTNAME", node.name)

    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})
    check_fields(
        "pod securityContext",
        pod_sc,
        {"runAsUser", "runAsGroup", "runAsNonRoot", "supplementalGroups", "seccompProfile"},
    )
    check_fields(
        "container securityContext",
        sc,
        {
            "privileged",
            "readOnlyRootFilesystem",
            "capabilities",
            "allowPrivilegeEscalation",
            "runAsUser",
            "runAsGroup",
        },
    )
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if uid is None:
        uid = int(str(image.get("User", "0")).split(":")[0] or 0)
    if gid is None:
        gid = 0
    if pod_sc.get("runAsNonRoot") and uid == 0:
        raise Untranslated("runAsNonRoot with uid 0: the kubelet refuses to start it")
    privileged = bool(sc.get("privileged"))
    if "seccompProfile" in pod_sc and not privileged:
        # a privileged container runs unconfined whatever the profile says; any other would
        # need the runtime's default filter, which this translation does not carry
        raise Untranslated("seccompProfile of a container that is not privileged")
    caps = current_capabilities() if privileged else list(DEFAULT_CAPABILITIES)
    for cap in sc.get("capabilities", {}).get("add", []):
        name = "CAP_" + cap.removeprefix("CAP_")
        if name not in caps:
            caps.append(name)
    for cap in sc.get("capabilities", {}).get("drop", []):
        name = "CAP_" + cap.removeprefix("CAP_")
        caps = [c for c in caps if c != name and cap != "ALL"]
    return {
        "terminal": False,
        "user": {
            "uid": uid,
            "gid": gid,
            "additionalGids": list(pod_sc.get("supplementalGroups", [])),
        },
        "args": [*entrypoint, *args],
        "env": [f"{k}={v}" for k, v in env.items()],
        "cwd": image.get("WorkingDir") or "/",
        "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
        "noNewPrivileges": not privileged and sc.get("allowPrivilegeEscalation") is False,
    }


def current_capabilities() -> list[str]:
    """The capabilities in this process's bounding set (what a privileged container gets)."""
    status = Path("/proc/self/status").read_text()
    (bounding,) = [
        int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapBnd:")
    ]
    return [name for bit, name in enumerate(CAPABILITIES) if bounding >> bit & 1]


def hostpath(volume: dict[str, Any], node: Node) -> Path:
    check_fields("hostPath", volume, {"path", "type"})
    path = node.root / volume["path"].lstrip("/")
    kind = volume.get("type", "")
    if kind == "DirectoryOrCreate" and not path.exists():
        missing = [p for p in [path, *path.parents] if not p.exists()]
        path.mkdir(mode=0o755, parents=True)
        node.created.extend(missing)
    elif kind in ("Directory", "DirectoryOrCreate") and not path.is_dir():
        raise Untranslated(f"hostPath {volume['path']}: not a directory on the node")
    elif kind not in ("", "Directory", "DirectoryOrCreate"):
        raise Untranslated(f"hostPath type {kind}")
    return path


def kubelet_volume(name: str, volume: dict[str, Any], node: Node) -> Path:
    """The directory the kubelet fills for a configMap, secret, projected or emptyDir volume."""
    path = node.volumes / name
    path.mkdir(parents=True, exist_ok=True)
    if "configMap" in volume:
        source = volume["configMap"]
        check_fields("configMap", source, {"name", "items", "defaultMode", "optional"})
        for key, text in node.config_maps[source["name"]].items():
            (path / key).write_text(text)
    elif "secret" in volume:
        source = volume["secret"]
        check_fields("secret", source, {"secretName", "optional", "defaultMode", "items"})
        data = node.secrets.get(source["secretName"])
        if data is None and not source.get("optional"):
            raise Untranslated(f"secret {source['secretName']} does not exist and is required")
        for key, text in (data or {}).items():
            (path / key).write_text(text)
            (path / key).chmod(source.get("defaultMode", 0o644))
    elif "projected" in volume:
        for item in volume["projected"]["sources"]:
            for entry in item.get("downwardAPI", {}).get("items", []):
                if entry["fieldRef"]["fieldPath"] != "metadata.namespace":
                    raise Untranslated(f"downwardAPI {entry}")
                (path / entry["path"]).write_text(node.namespace)
            # serviceAccountToken and kube-root-ca.crt come from the API server, which a test
            # without a cluster does not have: the agent reads them only with Kubernetes on.
    elif "emptyDir" in volume:
        check_fields("emptyDir", volume["emptyDir"], {"sizeLimit", "medium"})
        path.chmod(0o777)
    return path


def mounts(pod: dict[str, Any], container: dict[str, Any], node: Node) -> list[dict[str, Any]]:
    """The container's file systems: the runtime's own, then each volumeMount in order."""
    privileged = bool(container.get("securityContext", {}).get("privileged"))
    found: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": []},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []},
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", "rw" if privileged else "ro"],
        },
    ]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        check_fields(
            "volumeMount",
            mount,
            {"name", "mountPath", "readOnly", "recursiveReadOnly", "mountPropagation", "subPath"},
        )
        if mount.get("subPath") or mount.get("mountPropagation", "None") != "None":
            raise Untranslated(f"volumeMount {mount['name']}: subPath or propagation")
        volume = volumes[mount["name"]]
        check_fields(
            f"volume {volume['name']}",
            volume,
            {"name", "hostPath", "configMap", "secret", "projected", "emptyDir"},
        )
        if "hostPath" in volume:
            source = hostpath(volume["hostPath"], node)
        else:
            source = kubelet_volume(mount["name"], volume, node)
        options = ["rbind", "rprivate"]
        if mount.get("readOnly"):
            rro = mount.get("recursiveReadOnly", "Disabled")
            if rro not in ("Disabled", "Enabled", "IfPossible"):
                raise Untranslated(f"recursiveReadOnly {rro}")
            options.append("rro" if rro in ("Enabled", "IfPossible") else "ro")
        elif "recursiveReadOnly" in mount and mount["recursiveReadOnly"] != "Disabled":
            raise Untranslated("recursiveReadOnly without readOnly: the API refuses it")
        found.append(
            {
                "destination": mount["mountPath"],
                "type": "bind",
                "source": str(source),
                "options": options,
            }
        )
    return found


def resources(container: dict[str, Any]) -> dict[str, Any]:
    limits = container.get("resources", {}).get("limits", {})
    found: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    if "memory" in limits:
        found["memory"] = {"limit": quantity(str(limits["memory"]))}
    if "cpu" in limits:
        cpu = str(limits["cpu"])
        millis = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
        found["cpu"] = {"quota": millis * 100, "period": 100000}
    return found


def quantity(text: str) -> int:
    """A Kubernetes memory quantity in bytes (binary and decimal suffixes)."""
    for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    for suffix, factor in (("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def runtime_spec(pod: dict[str, Any], container_name: str, image: dict[str, Any], node: Node,
                 cgroup: str) -> dict[str, Any]:  # fmt: skip
    """The OCI runtime spec (config.json) of the pod's container `container_name`, `image` the
    OCI image configuration's `config` object."""
    check_fields(
        "pod spec",
        pod,
        POD_FIELDS_ELSEWHERE
        | {"containers", "volumes", "securityContext", "hostPID", "hostNetwork"},
    )
    container = container_of(pod, container_name)
    check_fields(
        f"container {container_name}",
        container,
        CONTAINER_FIELDS_ELSEWHERE
        | {"command", "args", "env", "resources", "securityContext", "volumeMounts"},
    )
    privileged = bool(container.get("securityContext", {}).get("privileged"))
    namespaces: list[dict[str, str]] = [
        {"type": "mount"},
        {"type": "ipc"},
        {"type": "uts"},
        {"type": "network", "path": str(node.netns)},
    ]
    if not pod.get("hostPID"):
        namespaces.append({"type": "pid"})
    linux: dict[str, Any] = {
        "namespaces": namespaces,
        "resources": resources(container),
        "cgroupsPath": cgroup,
    }
    if privileged:
        linux["resources"]["devices"] = [{"allow": True, "access": "rwm"}]
    else:
        linux["maskedPaths"] = [
            "/proc/acpi",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/proc/scsi",
            "/sys/firmware",
        ]
        linux["readonlyPaths"] = [
            "/proc/asound",
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger",
        ]
    return {
        "ociVersion": "1.0.2",
        "process": process(pod, container, image, node),
        "root": {
            "path": "rootfs",
            "readonly": bool(container.get("securityContext", {}).get("readOnlyRootFilesystem")),
        },
        "hostname": node.name,
        "mounts": mounts(pod, container, node),
        "linux": linux,
    }


def probes(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The kubelet's probes of the container, their named ports resolved to numbers."""
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    found = {}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        if kind not in container:
            continue
        probe = dict(container[kind])
        for how in ("httpGet", "grpc", "tcpSocket"):
            if how in probe:
                action = dict(probe[how])
                port = action["port"]
                action["port"] = ports[port] if isinstance(port, str) else port
                probe[how] = action
        found[kind] = probe
    return found


def remove_created(node: Node) -> None:
    """Remove the hostPath directories the translation made, deepest first."""
    for path in sorted(set(node.created), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if child.is_dir() and not child.is_symlink():
                    child.rmdir()
                else:
                    child.unlink()
            path.rmdir()
    node.created.clear()
