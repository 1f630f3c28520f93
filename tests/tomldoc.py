"""TOML documents written from nested dicts, wrong types and all, for property tests of the
configuration readers (containerd, CRI-O)."""

from __future__ import annotations

import json


def toml_text(value: object, prefix: str = "") -> str:
    """A TOML document for a nested dict (None left out), wrong types and all."""
    if not isinstance(value, dict):
        return ""
    lines, tables = [], []
    for key, item in value.items():
        name = f'"{key}"'
        if isinstance(item, dict):
            tables.append((f"{prefix}.{name}" if prefix else name, item))
        elif item is not None:
            lines.append(f"{name} = {toml_value(item)}")
    out = "\n".join(lines) + "\n"
    for name, table in tables:
        out += f"[{name}]\n" + toml_text(table, name)
    return out


def toml_value(item: object) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, str):
        # JSON's string escapes are TOML's too; DEL must be escaped in TOML only.
        return json.dumps(item, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(item, list):
        return (
            "["
            + ", ".join(toml_value(i) for i in item if i is not None and not isinstance(i, dict))
            + "]"
        )
    return '""'
