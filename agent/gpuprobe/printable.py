"""Text from nodes and agents made safe for a terminal: what a node name, a kernel-log line, a
scheduler's message or an agent's finding holds is shown, never obeyed.

A node name holding `ESC]0;...BEL ESC[2J` would retitle the terminal and clear the screen, and
a newline or a carriage return inside a message would forge a line of the report. Every human
output (check, audit, mesh) passes its lines through `printable`: C0 and C1 control characters,
DEL, the Unicode line and paragraph separators and the bidirectional overrides are written as
escapes (`\\x1b`, `\\n`, `\\u202e`), and only the colour codes the reports paint statuses with
stay codes. JSON output is never passed through here: it stays exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The colours gpuprobe paints statuses with (green, yellow, red, magenta) and their reset.
PAINT = re.compile(r"\x1b\[(?:3[1235]|0)m")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in NAMED:
        return NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(text: str, painted: bool = False) -> str:
    """`text` with every control character escaped; with `painted`, the status colours
    gpuprobe itself writes (and only those) kept as they are."""
    if not painted:
        return CONTROL.sub(_escaped, text)
    pieces = PAINT.split(text)
    codes = PAINT.findall(text)
    out = [CONTROL.sub(_escaped, pieces[0])]
    for code, piece in zip(codes, pieces[1:], strict=True):
        out += [code, CONTROL.sub(_escaped, piece)]
    return "".join(out)


def screen(lines: Iterable[str]) -> str:
    """Lines as one text for a terminal (a newline after each), each made printable."""
    return "".join(printable(line, painted=True) + "\n" for line in lines)
