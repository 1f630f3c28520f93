"""What a test's logs say beside the table: NCCL's own words when a run fails, and which
machines the ranks ran on.

NCCL writes its warnings as `<host>:<pid>:<tid> [<device>] [<file>:<line> ]NCCL WARN <text>`
(the file and line since NCCL 2.12 or so); nccl-tests ends a failed rank with `<host>: Test
NCCL failure <file>:<line> '<error string>'` (or `Test CUDA failure`), and gpuprobe's rank
program with its own mark (`gpuprobe.mesh.nccl_rank.FAILED_MARK`). The table's header names
each rank's machine: `#  Rank  8 Group  0 Pid   6733 on ztan-mig-gq73 device  0 [...]` (older
releases without `Group`). In a pod the host is the pod's hostname, which the pods' list maps
to a node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuprobe.mesh.nccl_rank import FAILED_MARK

_WARN = re.compile(r"^(?P<host>[^\s:]+):\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL WARN (?P<text>.*\S)")
_TEST = re.compile(r"^(?P<host>[^\s:]+): Test (?P<what>NCCL|CUDA) failure (?P<text>.*\S)")
_TELLING = re.compile(
    r"(?i)\b(error|fail(ed|ure)?|could not|cannot|unable|refused|denied|not found|no such|"
    r"killed|timed? ?out)\b"
)
_INFO = re.compile(r"^[^\s:]+:\d+:\d+ \[\d+\] NCCL INFO ")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\b")
# How much of NCCL's words one finding carries: the first of each machine, a few machines.
MOST_SAID = 3
MOST_CHARACTERS = 300


@dataclass(frozen=True)
class Said:
    """A failure in the words of whoever saw it: the machine (pod hostname; "" when the line
    names none) and the words (`NCCL WARN ...`, `Test NCCL failure ...`)."""

    host: str
    words: str


def failures(log: str) -> list[Said]:
    """Every failure line, in the order written, each once."""
    found: list[Said] = []
    for line in log.splitlines():
        line = line.rstrip()
        if match := _WARN.match(line):
            said = Said(match["host"], f"NCCL WARN {match['text']}")
        elif match := _TEST.match(line):
            said = Said(match["host"], f"Test {match['what']} failure {match['text']}")
        elif line.startswith(FAILED_MARK):
            said = Said("", line.removeprefix("# ").strip())
        else:
            continue
        if said not in found:
            found.append(said)
    return found


def first_per_host(said: Iterable[Said]) -> list[Said]:
    """Each machine's first words (NCCL's warning before nccl-tests' own line), at most
    MOST_SAID machines, each cut to MOST_CHARACTERS."""
    kept: dict[str, Said] = {}
    for item in said:
        known = kept.get(item.host)
        if known is None or (
            not known.words.startswith("NCCL WARN") and item.words.startswith("NCCL WARN")
        ):
            kept[item.host] = item
    return [Said(s.host, _cut(s.words)) for s in list(kept.values())[:MOST_SAID]]


def _cut(text: str) -> str:
    return text if len(text) <= MOST_CHARACTERS else text[: MOST_CHARACTERS - 1] + "…"


def last_words(log: str, lines: int = 3) -> str:
    """The last non-empty lines of a log, joined."""
    kept = [line.strip() for line in log.splitlines() if line.strip()][-lines:]
    return _cut(" / ".join(kept))


def telling_words(log: str) -> str:
    """What a failure without NCCL's words said: the first line that tells of an error (`ssh:
    Could not resolve hostname ...` before mpirun's boilerplate about it), else the last
    lines."""
    for line in log.splitlines():
        if _TELLING.search(line) and not _INFO.match(line):
            return _cut(line.strip())
    return last_words(log)


def rank_hosts(log: str) -> dict[int, str]:
    """The machine of each rank, from the table's header."""
    return {int(m.group(1)): m.group(2) for m in map(_RANK.match, log.splitlines()) if m}
