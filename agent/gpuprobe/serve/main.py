"""`gpuprobe serve`: build the host and the agent, log the bound ports, run until SIGTERM.

SIGTERM (or Ctrl-C) stops the agent in order and exits 0; should the orderly stop hang (a
stuck check holding a call), a watchdog removes the temporary data and exits 0 anyway.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from gpuprobe import __version__, cleanup
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.registry import CHECKS
from gpuprobe.checks.runner import checks_states
from gpuprobe.config import Config
from gpuprobe.daemon.core import sticky_clearer
from gpuprobe.host import Host
from gpuprobe.serve import logs
from gpuprobe.serve.agent import Agent, ServeOptions

# How long the orderly stop may take before the watchdog ends the process.
STOP_GRACE_SECONDS = 2.0
WATCHDOG_SECONDS = 6.0


def serve(host: Host, config: Config, names: list[str], options: ServeOptions) -> int:
    """Run the agent until SIGTERM or SIGINT, then end the process with exit status 0."""
    log = logs.setup()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        """The first signal asks for an orderly stop; a second one ends at once."""
        if stop.is_set():  # a second signal: no more waiting
            cleanup.remove_all()
            os._exit(0)
        stop.set()

    # Before the agent exists: a SIGTERM while it starts up still ends in an orderly stop.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # The checks' states, kept by the agent's runner and shared with the clearing RPC, so
    # that a clearing reaches the xid check's memory as well as its state file.
    states = checks_states(host, config, CHECKS)
    clear_xid = sticky_clearer(CheckContext(host, states), config)
    agent = Agent(host, config, names, options, clear_xid=clear_xid, states=states)
    agent.start()
    log.info(
        "listening",
        extra={
            "grpc_port": agent.grpc_port,
            "metrics_port": agent.metrics_port,
            "grpc_listen": options.grpc_listen,
            "metrics_listen": options.metrics_listen,
            "node": host.node_name,
            "snapshot": str(host.snapshot_dir) if host.snapshot_dir else None,
            "checks": names,
            "tls": agent.tls,
            "token": options.token_file is not None,
            # an optional Secret not created yet: guarded RPCs closed until the file appears
            "token_pending": agent.guard.token is not None and agent.guard.token.pending(),
            "open_mode": options.allow_unauthenticated,
            "version": __version__,
        },
    )
    while not stop.wait(3600):
        pass
    log.info("stopping")
    watchdog = threading.Timer(WATCHDOG_SECONDS, _force_exit)
    watchdog.daemon = True
    watchdog.start()
    agent.stop(STOP_GRACE_SECONDS)
    log.info("stopped")
    logging.shutdown()
    sys.stderr.flush()
    # Worker threads may still wait on a stuck check: end here rather than join them.
    os._exit(0)


def _force_exit() -> None:
    cleanup.remove_all()
    logging.getLogger("gpuprobe.serve").error("stop took too long; exiting")
    sys.stderr.flush()
    os._exit(0)
