"""kube-scheduler's reasons, decoded: the `PodScheduled` condition's message and the
`FailedScheduling` events carry the same text, the scheduler's FitError:

    0/8 nodes are available: 3 Insufficient nvidia.com/gpu, 5 node(s) had untolerated taint
    {gpuprobe.io/unhealthy: XID}. preemption: 0/8 nodes are available: 3 No preemption
    victims found for incoming pod, 5 Preemption is not helpful for scheduling.

(pkg/scheduler/framework/types.go: "0/%v nodes are available: " and the reasons' histogram,
"<count> <reason>" sorted and joined by ", "; then the preemption attempt's own.) Each reason
is a plugin's ErrReason: `Insufficient <resource>` (noderesources), `node(s) had untolerated
taint {<key>: <value>}` (tainttoleration, 1.25+; `node(s) had taint {<key>: <value>}, that the
pod didn't tolerate` before), `node(s) didn't match Pod's node affinity/selector`
(nodeaffinity; `node(s) didn't match node selector` before 1.24), `node(s) were
unschedulable`, and the volume, affinity and DRA plugins' own. What no rule here knows stays
`other`, with the scheduler's words.

Volcano's scheduler words its FitErrors alike but "unavailable" (volcano-sh/volcano,
pkg/scheduler/api/unschedule_info.go: `0/%v nodes are unavailable: %v.`, the same histogram;
`all nodes are unavailable: ...` when it does not count them): decoded the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD = re.compile(r"(?:0/(\d+)|all) nodes are (?:un)?available:\s*(.*)", re.S)
CLAUSE_SPLIT = re.compile(r",\s+(?=\d+ )")
COUNTED = re.compile(r"(\d+) (.+)", re.S)
TAINT = re.compile(r"node\(s\) had (?:untolerated )?taint \{([^:}]*): ?([^}]*)\}")
INSUFFICIENT = re.compile(r"Insufficient (\S+)")
# The causes an operator acts on, by the words of the reason.
PHRASES = (
    ("selector", ("didn't match Pod's node affinity/selector", "didn't match node selector")),
    (
        "placement",
        (
            "didn't match pod affinity rules",
            "didn't match pod anti-affinity rules",
            "didn't match pod affinity/anti-affinity rules",
            "didn't match pod topology spread constraints",
            "didn't match the requested node name",
        ),
    ),
    ("unschedulable", ("were unschedulable",)),
    ("taint", ("had taints that the pod didn't tolerate",)),
    (
        "volume",
        (
            "unbound immediate PersistentVolumeClaims",
            "persistentvolumeclaim",
            "available persistent volumes to bind",
            "volume node affinity conflict",
            "exceed max volume count",
            "no available volume zone",
        ),
    ),
    (
        "dra",
        (
            "cannot allocate all claims",
            "resourceclaim not found",
            "waiting for resource driver",
            "resourceclaim",
            "ResourceClaim",
        ),
    ),
)


@dataclass(frozen=True)
class Reason:
    """One reason of the histogram: how many nodes it stopped (None for a reason given once
    for the whole pod, such as unbound claims), the cause and what it names (a resource, a
    taint `key=value`), and the scheduler's words."""

    nodes: int | None
    cause: str  # insufficient, taint, selector, placement, unschedulable, volume, dra, other
    subject: str
    text: str


@dataclass(frozen=True)
class FitError:
    """A decoded scheduler message: the nodes considered and why each group was refused."""

    nodes: int | None
    reasons: tuple[Reason, ...]
    preemption: str

    @property
    def decoded(self) -> bool:
        """Whether the message had the scheduler's form."""
        return self.nodes is not None


def decode(message: str) -> FitError:
    """The scheduler's message as its reasons; a message of another form (another scheduler,
    a truncated event) is one `other` reason with its words."""
    text = " ".join(message.split())
    head, _, preemption = text.partition(" preemption: ")
    match = HEAD.match(head)
    if match is None:
        return FitError(None, (Reason(None, "other", "", text),) if text else (), "")
    body = match.group(2).rstrip().removesuffix(".")
    reasons = tuple(_reason(c.strip()) for c in CLAUSE_SPLIT.split(body) if c.strip())
    if match.group(1) is not None:
        return FitError(int(match.group(1)), reasons, preemption.strip())
    # "all nodes are unavailable": as many as the reasons count.
    return FitError(sum(r.nodes or 0 for r in reasons), reasons, preemption.strip())


def _reason(clause: str) -> Reason:
    counted = COUNTED.fullmatch(clause)
    nodes, words = (int(counted.group(1)), counted.group(2)) if counted else (None, clause)
    if (insufficient := INSUFFICIENT.fullmatch(words)) is not None:
        return Reason(nodes, "insufficient", insufficient.group(1), words)
    if (taint := TAINT.match(words)) is not None:
        key, value = taint.group(1).strip(), taint.group(2).strip()
        return Reason(nodes, "taint", f"{key}={value}" if value else key, words)
    for cause, phrases in PHRASES:
        if any(p in words for p in phrases):
            return Reason(nodes, cause, "", words)
    return Reason(nodes, "other", "", words)
