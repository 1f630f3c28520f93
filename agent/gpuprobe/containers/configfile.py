"""Reading the node's configuration files (TOML, JSON, YAML) without ever raising.

Container runtimes, the NVIDIA Container Toolkit and CDI keep their settings in files that
people edit by hand. Every reader here takes any bytes: what cannot be read or parsed comes
back as a `FileProblem` naming the file (with line and column where the parser gives them),
which the checks turn into a finding. A file that is absent is `None`, not a problem.
"""

from __future__ import annotations

import errno
import json
import os
import tomllib
from dataclasses import dataclass
from typing import Any

from gpuprobe.files import MAX_NESTING, nesting_depth
from gpuprobe.host.fs import HostFS

# Configuration files are small; a larger one is read up to this size (and then most likely
# fails to parse, which is reported).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class FileProblem:
    """A configuration file that cannot be used, and why (one line)."""

    path: str
    problem: str
    # The file is there but could not be read (permissions, I/O): nothing is known of its
    # content, which is no fault of the file's (CONFIG_UNREADABLE, not CONFIG_INVALID).
    unreadable: bool = False


class Invalid(Exception):
    """A configuration value of the wrong type or shape (the message names the key)."""


def read_host_file(fs: HostFS, path: str) -> bytes | FileProblem | None:
    """A host file's bytes; None when absent, a FileProblem when it cannot be read."""
    if not fs.exists(path):
        return None
    if fs.is_dir(path):
        return FileProblem(path, "is a directory, not a file")
    try:
        return fs.read_bytes(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return None  # a dangling link, or removed between the two looks
    except OSError as exc:
        who = (
            f" by gpuprobe (uid {os.geteuid()})" if exc.errno in (errno.EACCES, errno.EPERM) else ""
        )
        return FileProblem(path, f"cannot be read{who} ({exc.strerror or exc})", unreadable=True)


def _text(path: str, raw: bytes) -> str | FileProblem:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FileProblem(path, f"is not UTF-8 text (byte {exc.start})")


def parse_toml(path: str, raw: bytes) -> dict[str, Any] | FileProblem:
    """A TOML document; its error names line and column as TOML parsers do."""
    text = _text(path, raw)
    if isinstance(text, FileProblem):
        return text
    if nesting_depth(text) > MAX_NESTING:  # before tomllib recurses into it
        return FileProblem(path, f"is not valid TOML: nested deeper than {MAX_NESTING} levels")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return FileProblem(path, f"is not valid TOML: {exc}")
    except (RecursionError, ValueError) as exc:  # absurdly deep nesting, odd numbers
        return FileProblem(path, f"is not valid TOML: {type(exc).__name__}")


def parse_json(path: str, raw: bytes) -> Any:
    """A JSON document, or a FileProblem with the line and column of the error."""
    text = _text(path, raw)
    if isinstance(text, FileProblem):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return FileProblem(
            path, f"is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
        )
    except (RecursionError, ValueError) as exc:
        return FileProblem(path, f"is not valid JSON: {type(exc).__name__}")


def parse_yaml(path: str, raw: bytes) -> Any:
    """A YAML document (safe types only), or a FileProblem with line and column."""
    import yaml

    text = _text(path, raw)
    if isinstance(text, FileProblem):
        return text
    if nesting_depth(text) > MAX_NESTING:  # before PyYAML recurses into it
        return FileProblem(path, f"is not valid YAML: nested deeper than {MAX_NESTING} levels")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return FileProblem(path, f"is not valid YAML: {where}{problem}")
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        # PyYAML builds dates and numbers with Python's own types: `2024-13-01` raises
        # ValueError from datetime, which says nothing about where; name the kind.
        return FileProblem(path, f"is not valid YAML: {type(exc).__name__}: {exc}")


def kind_of(value: Any) -> str:
    """How a wrong-typed value is named in a message: 'a string', 'a list', ..."""
    if value is None:
        return "nothing"
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)
