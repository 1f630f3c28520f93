"""From a spot notice appearing to the taint on the node: the daemon's notice path, timed.

    PYTHONPATH=tests .venv/bin/python bench/notice_to_taint.py --trials 20 --poll 5

One agent (`gpuprobe serve`'s Agent, in this process) on the snapshot
`synthetic-k8s-gpus-by-uuid`, its lifecycle check asking the loopback IMDSv2 stand-in
(`tests/metadata_standins.py`) and publishing to the Kubernetes API stand-in
(`tests/kube_standin.py`, the real client library) with the taint on. `--interval` is an hour,
so only the notice poller (`lifecycle.poll_seconds`) can bring the notice in. Each trial sets
a spot `instance-action` at a random moment, and measures until the node carries
`gpuprobe.io/terminating=preemption:NoSchedule` in the API stand-in; then the notice is taken
back and the taint's removal awaited before the next trial. Prints one JSON object: p50, p99
and max seconds per poll interval, and p50 and p99 of the part after the poller's first look
that heard the notice (the check, the store and the publish; the rest is the wait for the
next look, uniform over the poll interval). With fewer than 100 trials p99 is the maximum.

    PYTHONPATH=tests .venv/bin/python bench/notice_to_taint.py --trials 20 --poll 1 --before REV

With `--before REV`, each poll interval is measured first on the tree of the git revision REV
(`git archive` of its code, tests and manifests into a temporary directory, this bench as it
was there run on that tree's code and stand-ins, the same seed) and then on this one, in the
same run, and the ratios of the p50s are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from gpuprobe.checks.lifecycle import LifecycleConfig  # noqa: E402
from gpuprobe.checks.registry import CHECKS  # noqa: E402
from gpuprobe.config import Config, KubernetesConfig, ServeConfig, TaintConfig  # noqa: E402
from gpuprobe.effects.terminating import TERMINATING_KEY  # noqa: E402
from gpuprobe.host import snapshot_host  # noqa: E402
from gpuprobe.host.metadata import LiveMetadata  # noqa: E402
from gpuprobe.serve.agent import Agent, ServeOptions  # noqa: E402
from kube_standin import running as kube_running  # noqa: E402
from metadata_standins import ImdsStandIn  # noqa: E402
from metadata_standins import running as metadata_running  # noqa: E402

NODE = "gpu-node-17"
SNAPSHOT = ROOT / "tests/snapshots/synthetic-k8s-gpus-by-uuid"


def terminating(taints: list[dict[str, str]]) -> bool:
    return any(t.get("key") == TERMINATING_KEY for t in taints)


def wait(condition: object, timeout: float) -> float:
    """Seconds until `condition()` holds (polled every millisecond); raises on timeout."""
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise TimeoutError("the taint did not change in time")
        time.sleep(0.001)
    return time.monotonic()


def trials(poll: float, count: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """`count` notice-to-taint latencies with the poller at `poll` seconds, and of each the
    part after the poller's first look that heard the notice (the check, the store, the
    publish: what the poll interval does not decide)."""
    with (
        tempfile.TemporaryDirectory() as directory,
        kube_running(Path(directory)) as kube,
        metadata_running(ImdsStandIn) as imds,
    ):
        host = snapshot_host(str(SNAPSHOT), NODE)
        host.metadata = LiveMetadata()
        settings = LifecycleConfig(provider="aws", endpoint=imds.url, poll_seconds=poll)
        config = Config(
            serve=ServeConfig(interval_seconds=3600),
            kubernetes=KubernetesConfig(start_jitter_seconds=0, taint=TaintConfig(enabled=True)),
            sections={"lifecycle": settings},
        )
        options = ServeOptions(
            grpc_listen="127.0.0.1:0",
            metrics_listen="127.0.0.1:0",
            kubeconfig=str(kube.kubeconfig()),
        )
        agent = Agent(host, config, list(CHECKS), options)
        agent.start()
        try:
            wait(lambda: agent.store.current().report is not None, 60)
            latencies, after_heard = [], []
            spot = "/latest/meta-data/spot/instance-action"
            for _ in range(count):
                time.sleep(rng.uniform(0, poll))  # a notice comes at any point of a poll
                notice = time.monotonic() + 120
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
                imds.spot = {"action": "terminate", "time": stamp}
                started = time.monotonic()
                done = wait(lambda: terminating(kube.taints(NODE)), 30)
                latencies.append(done - started)
                heard = min(r.at for r in imds.seen("GET") if r.path == spot and r.at >= started)
                after_heard.append(done - heard)
                assert notice > done
                imds.spot = None
                wait(lambda: not terminating(kube.taints(NODE)), 30)
            return latencies, after_heard
        finally:
            agent.stop(grace=0.5)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(found: list[float], after: list[float]) -> dict[str, float]:
    return {
        "trials": len(found),
        "p50_seconds": round(statistics.median(found), 3),
        "p99_seconds": round(percentile(found, 0.99), 3),
        "max_seconds": round(max(found), 3),
        "after_heard_p50_seconds": round(statistics.median(after), 3),
        "after_heard_p99_seconds": round(percentile(after, 0.99), 3),
    }


def before(rev: str, poll: float, count: int, seed: int) -> dict[str, float]:
    """This bench as it was at `rev`, run on that revision's tree (code, stand-ins, snapshot)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "agent", "tests", "daemonset", "bench"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tree:
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        flags = ["--trials", str(count), "--poll", f"{poll:g}", "--seed", str(seed)]
        done = subprocess.run(
            [sys.executable, f"{tree}/bench/notice_to_taint.py", *flags],
            env={**os.environ, "PYTHONPATH": f"{tree}/agent"},
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise SystemExit(f"the bench at {rev} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout)[f"poll_{poll:g}s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--poll", type=float, action="append")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", metavar="REV", help="measure git revision REV first")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the agent's per-taint log lines are not results
    out: dict[str, object] = {}
    for poll in args.poll or [5.0, 1.0]:
        key = f"poll_{poll:g}s"
        rng = random.Random(args.seed)  # each interval's notices at the same moments
        if args.before is None:
            out[key] = figures(*trials(poll, args.trials, rng))
            continue
        then = before(args.before, poll, args.trials, args.seed)
        now = figures(*trials(poll, args.trials, rng))
        out[key] = {
            "before": then,
            "after": now,
            "p50_ratio": round(now["p50_seconds"] / then["p50_seconds"], 3),
            "after_heard_p50_ratio": round(
                now["after_heard_p50_seconds"] / then["after_heard_p50_seconds"], 3
            ),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
