"""What the commands that look at this node make of their flags: the configuration with the
flags' overrides, the checks to run, and the host (a snapshot replayed or the live node).

It imports the checks and the host: the commands import it when they run, never to build the
parser (see `gpuprobe.cli`).
"""

from __future__ import annotations

import argparse
import dataclasses

from gpuprobe.checks.registry import (
    CHECKS,
    refuse_unknown_names,
    resolve,
    section,
    section_name,
    sections,
)
from gpuprobe.checks.rules.sections import GpusConfig
from gpuprobe.checks.storage import StorageConfig
from gpuprobe.config import Config, load_config
from gpuprobe.errors import UsageError
from gpuprobe.host import Host, check_root, live_host, snapshot_host
from gpuprobe.host.podstatus import PodStatuses
from gpuprobe.kube.pods import pod_statuses as api_pod_statuses


def prepare(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """The configuration with flag overrides, and the checks to run."""
    config = load_config(args.config, sections())
    refuse_unknown_names(config)
    if args.expect_gpus is not None:
        try:
            expected = dataclasses.replace(section(config, GpusConfig), expect=args.expect_gpus)
        except UsageError as exc:
            raise UsageError(f"--expect-gpus: {exc}") from None
        config = config.with_section(section_name(GpusConfig), expected)
    storage_paths = getattr(args, "storage_path", None) or []
    if storage_paths:
        measured = section(config, StorageConfig)
        try:
            measured = dataclasses.replace(measured, paths=(*measured.paths, *storage_paths))
        except UsageError as exc:
            raise UsageError(f"--storage-path: {exc}") from None
        config = config.with_section(section_name(StorageConfig), measured)
    try:
        names = resolve(args.only)
    except KeyError as exc:
        raise UsageError(f"unknown check {exc.args[0]!r} (known: {', '.join(CHECKS)})") from None
    return config, names


def node_host(args: argparse.Namespace, config: Config | None = None) -> Host:
    """The node the command looks at: a snapshot replayed, or the live node under --root
    (with `config`: its pods from the API server when `kubernetes.enabled` says so)."""
    snapshot = getattr(args, "snapshot", None)
    node_name = getattr(args, "node_name", None)
    if snapshot:
        # Any --root, `/` too: a snapshot replays its own rootfs, so a root given beside it
        # would be silently ignored.
        if args.root is not None:
            raise UsageError(
                f"--snapshot and --root exclude each other (a snapshot replays its own "
                f"rootfs; --root {args.root} would be ignored)"
            )
        return snapshot_host(snapshot, node_name)
    root = host_root(args)
    check_root(root)
    pods = pod_statuses(args, config) if config is not None else None
    return live_host(root, node_name, pods)


def host_root(args: argparse.Namespace) -> str:
    """The live node's root: --root, `/` when it is not given."""
    root: str | None = getattr(args, "root", None)
    return root if root is not None else "/"


def pod_statuses(args: argparse.Namespace, config: Config) -> PodStatuses | None:
    """The API server as the live source of the node's pods (None: no API access). Only
    `serve` and `check --publish` insist on access that does not work; a plain `check` (or
    `capture`) without a `--kubeconfig` reads the node's disk alone then."""
    kubeconfig = getattr(args, "kubeconfig", None)
    try:
        return api_pod_statuses(config.kubernetes, kubeconfig)
    except UsageError as exc:
        if args.command == "serve" or getattr(args, "publish", False) or kubeconfig:
            raise
        if config.kubernetes.enabled is True:  # "true: no access is a usage error"
            raise UsageError(
                f"kubernetes.enabled is true and there is no access ({exc}): run in a pod, "
                "add --publish --kubeconfig FILE, or set kubernetes.enabled: auto"
            ) from None
        return None
