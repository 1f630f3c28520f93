"""Reading a snapshot's JSON files, with faults named by file, line and column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuprobe.errors import SnapshotError


def read_json(path: str | Path) -> Any:
    """A JSON file's content; FileNotFoundError when absent, SnapshotError when unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
