"""The `kubernetes` configuration section, when the feature is on, and the brake's selector."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube.core.selector import build_selector

from conftest import gpuprobe, snapshot
from gpuprobe.checks.registry import sections
from gpuprobe.config import load_config
from gpuprobe.effects.conditions import groups
from gpuprobe.effects.daemon import wanted
from gpuprobe.errors import ConfigError, UsageError
from gpuprobe.kube.api import in_cluster_available, parse_selector


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(str(path), sections()).kubernetes


def test_the_defaults(tmp_path: Path) -> None:
    k = load(tmp_path, "{}")
    assert (k.enabled, k.events, k.start_jitter_seconds, k.timeout_seconds) == (
        "auto",
        True,
        30,
        10,
    )
    assert k.conditions is None  # the checks' own groups, as their records name them
    assert groups(k) == {
        "GPUHardwareReady": ("driver", "gpus", "mig", "xid"),
        "GPURuntimeReady": ("toolkit", "cdi", "device_plugin", "sharing", "workloads"),
        "GPUNetworkReady": ("network", "rdma", "nccl"),
        "GPUStorageReady": ("storage",),
    }
    t = k.taint
    assert (t.enabled, t.effect, t.clear_after_seconds, t.max_unhealthy_fraction) == (
        False,
        "NoSchedule",
        300,
        0.2,
    )
    assert t.node_selector == "nvidia.com/gpu.present=true"
    assert t.codes == (
        "GPU_LOST",
        "DRIVER_NOT_LOADED",
        "DRIVER_LIBRARY_MISMATCH",
        "RUNTIME_NOT_CONFIGURED",
        "XID",
    )


def test_enabled_takes_auto_true_or_false(tmp_path: Path) -> None:
    assert load(tmp_path, "kubernetes: {enabled: true}").enabled is True
    assert load(tmp_path, "kubernetes: {enabled: false}").enabled is False
    assert load(tmp_path, "kubernetes: {enabled: auto}").enabled == "auto"
    with pytest.raises(
        ConfigError, match=r"kubernetes: enabled: 'yes please' is not auto, true or false"
    ):
        load(tmp_path, "kubernetes: {enabled: yes please}")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "kubernetes: {taint: {effect: Evict}}",
            "effect: 'Evict' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            "kubernetes: {taint: {max_unhealthy_fraction: 0}}",
            "max_unhealthy_fraction: 0 is not within 0-1",
        ),
        ("kubernetes: {taint: {clear_after_seconds: -1}}", "clear_after_seconds: -1 is negative"),
        (
            "kubernetes: {conditions: {gpu-ready: [gpus]}}",
            "conditions: 'gpu-ready' is not a condition type",
        ),
        ("kubernetes: {conditions: {GPUReady: []}}", "conditions.GPUReady: names no check"),
        ("kubernetes: {taints: {}}", "unknown key 'taints'"),
        ("kubernetes: {timeout_seconds: 0}", "timeout_seconds: 0 must be above 0"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(")):
        load(tmp_path, text)


def test_auto_is_on_with_a_kubeconfig_or_in_cluster_credentials(tmp_path: Path) -> None:
    auto, on, off = (
        load(tmp_path, f"kubernetes: {{enabled: {v}}}") for v in ("auto", "true", "false")
    )
    assert wanted(auto, "/some/kubeconfig") and wanted(on, None)
    assert not wanted(off, "/some/kubeconfig")
    assert wanted(auto, None) is in_cluster_available()
    account = tmp_path / "sa"
    account.mkdir()
    assert not in_cluster_available(account)


def test_the_selector_takes_equality_and_existence_terms() -> None:
    text = "nvidia.com/gpu.present=true,pool!=cpu,gpu,!cordoned"
    assert build_selector(parse_selector(text)) == text  # what lightkube sends
    assert build_selector(parse_selector("a==b")) == "a=b"
    for bad in ("a in (b,c)", "a=b,a=c", "!a=b", ""):
        with pytest.raises(UsageError):
            parse_selector(bad)


# Selectors the API server would refuse, or that gpuprobe's grammar does not take, and the
# one line that says why (issue 40 item 4: 'a=b=c' passed validation, then `serve` silently
# never tainted nor posted events and `audit --config` printed a thread's traceback).
BAD_SELECTORS = [
    ("a=b=c", "'b=c' is not a label value"),
    ("-gpu=true", "'-gpu' is not a label key"),
    ("Example.com/gpu=true", "'Example.com/gpu' is not a label key"),
    ("gpu=" + "x" * 64, f"'{'x' * 64}' is not a label value"),
    ("a=b,c in (d,e)", "cannot read 'c in (d' in 'a=b,c in (d,e)' (equality and existence"),
    ("!a=b", "cannot read '!a=b'"),
    ("a=b,a=c", "'a' is named twice in 'a=b,a=c'"),
    ("a=b,", "cannot read '' in 'a=b,'"),
]


@pytest.mark.parametrize(("selector", "why"), BAD_SELECTORS)
def test_a_selector_the_api_server_would_refuse_is_refused_when_the_config_loads(
    tmp_path: Path, selector: str, why: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, f"kubernetes:\n  taint:\n    node_selector: {selector!r}\n")
    assert f"kubernetes: taint: node_selector: {why}" in str(refused.value)


def test_the_selectors_the_api_server_takes_are_taken(tmp_path: Path) -> None:
    for good in (
        "nvidia.com/gpu.present=true",
        "a==b",
        "pool!=cpu,gpu,!cordoned",
        "node.kubernetes.io/instance-type=p5.48xlarge",
        "empty=",
        "k=" + "v" * 63,
    ):
        assert load(tmp_path, f"kubernetes: {{taint: {{node_selector: '{good}'}}}}")


@pytest.mark.parametrize("command", ["check", "serve", "audit"])
def test_each_command_refuses_a_bad_selector_in_one_line(tmp_path: Path, command: str) -> None:
    config = tmp_path / "gpuprobe.yaml"
    config.write_text("kubernetes:\n  taint:\n    node_selector: 'a=b=c'\n")
    args = {
        "check": ["--root", str(tmp_path)],
        "serve": ["--snapshot", snapshot("kvm-epyc-nogpu"), "--grpc-listen", "127.0.0.1:0",
                  "--metrics-listen", "127.0.0.1:0"],
        "audit": ["--targets", "127.0.0.1:9"],
    }[command]  # fmt: skip
    done = gpuprobe(command, "--config", str(config), *args)
    assert (done.returncode, done.stdout) == (64, "")
    assert done.stderr == (
        f"gpuprobe: config {config}: kubernetes: taint: node_selector: 'b=c' is not a label "
        "value (empty, or at most 63 characters, alphanumeric at both ends with - _ . inside) "
        f"(see gpuprobe {command} --help)\n"
    )
