"""What the painting commands ask of the terminal: colour, and the width to wrap to."""

from __future__ import annotations

import os
import shutil
import sys


def colour() -> bool:
    """Whether to paint the statuses: only on a terminal that shows colour, and never with
    NO_COLOR set (no-color.org) or on TERM=dumb (a terminal that has no escape sequences)."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def terminal_width() -> int | None:
    """The columns to wrap the report to: the terminal's, or None (no wrapping) when the
    output is not a terminal (a pipe or a file gets whole lines, for grep)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
