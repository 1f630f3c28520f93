"""IMEX_NOT_READY: a GPU in a multi-node NVLink domain, and no working IMEX daemon or channel.

Judged in the `gpus` check beside FABRIC_NOT_READY, from the facts of
`gpuprobe.gpu.nvidia.fabric`. A node whose GPUs name no cluster (a single-node NVLink system:
zero cluster UUID, clique 0) is never judged. The finding is a WARNING with FIX_CONFIG:
multi-node jobs cannot share GPU memory across the domain, single-node work is untouched,
and where IMEX daemons are started per job
(the NVIDIA DRA driver's ComputeDomains, a Slurm prolog) an idle node has none by design.
"""

from __future__ import annotations

from gpuprobe.gpu.nvidia.fabric import CHANNELS, DAEMON, ImexFacts
from gpuprobe.report import Action, Finding, Severity


def findings(facts: ImexFacts) -> list[Finding]:
    """IMEX_NOT_READY for the node when it is in a domain and IMEX is not there, naming
    everything missing."""
    if not facts.in_domain:
        return []
    missing = []
    if not facts.daemon_pids:
        missing.append(f"no {DAEMON} daemon runs")
    if facts.nodes is None:
        missing.append(f"its nodes file {facts.nodes_file} is missing")
    elif not facts.nodes:
        missing.append(f"its nodes file {facts.nodes_file} lists no node")
    if not facts.channels:
        missing.append(f"no IMEX channel device under {CHANNELS}")
    if not missing:
        return []
    (uuid, clique), *_ = facts.domain_gpus.values()
    gpus = ", ".join(str(i) for i in sorted(facts.domain_gpus))
    return [
        Finding(
            "IMEX_NOT_READY",
            Severity.WARNING,
            f"GPUs {gpus} are in multi-node NVLink domain {uuid} (clique {clique}) but "
            f"{'; '.join(missing)}: jobs across the domain's nodes cannot share GPU memory. "
            f"Start {DAEMON} with the domain's nodes file (or let the DRA driver's ComputeDomain "
            "do it) and create the channel (NVreg_CreateImexChannel0=1)",
            Action.FIX_CONFIG,
            "node",
        )
    ]
