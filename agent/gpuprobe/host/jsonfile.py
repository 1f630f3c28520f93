"""Reading a snapshot's JSON files, with faults named by file, line and column.

A snapshot may come from anywhere (a support case, an attacker): its files are read only when
regular and at most `MAX_JSON_BYTES`, JSON's non-standard `NaN`/`Infinity` and numbers beyond a
float's range are refused, and nesting deeper than the parser's stack is an error, not a crash.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gpuprobe.errors import SnapshotError
from gpuprobe.files import FileRefused, read_regular

# nvml.json of a MIG node with every profile recorded is about 130 KB: 64 MiB is no real one.
MAX_JSON_BYTES = 64 * 1024 * 1024


def read_json(path: str | Path) -> Any:
    """A JSON file's content; FileNotFoundError when absent, SnapshotError when unreadable."""
    try:
        data = read_regular(path, MAX_JSON_BYTES)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror or exc}") from None
    except FileRefused as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    try:
        return parse_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SnapshotError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # parse_json's refusals, Python's 4300-digit integer limit
        raise SnapshotError(f"{path}: {exc}") from None


def parse_json(text: str) -> Any:
    """Strict JSON: raises ValueError (JSONDecodeError for syntax) for NaN, Infinity, a number
    beyond a float's range, or nesting too deep to parse."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond the range of a number")
    return value
