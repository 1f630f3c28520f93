"""Reading a kubeconfig file (`--kubeconfig`) into lightkube's KubeConfig, or one clear line.

lightkube reads whatever YAML it is given and indexes into it: a file without `clusters` fails
with a bare `KeyError: 'clusters'`, a binary file with a codec error. This reads the file as
kubectl's loader expects it (a regular file of YAML text, a mapping whose `clusters`,
`contexts` and `users` are lists of named entries) and says what is wrong in the words
"not a kubeconfig: ..." before lightkube sees it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuprobe.errors import UsageError
from gpuprobe.files import MAX_NESTING, FileRefused, nesting_depth, read_regular

if TYPE_CHECKING:
    from lightkube.config.kubeconfig import KubeConfig

# A kubeconfig is a few KiB, some tens with certificates embedded; beyond this it is a wrong
# path (PyYAML would take minutes over 100 MB).
MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024
# The lists of named entries, and the key of each entry's body (clientcmd's v1 Config).
NAMED_LISTS = {"clusters": "cluster", "contexts": "context", "users": "user"}
REQUIRED_LISTS = ("clusters", "contexts")


class NotAKubeconfig(UsageError):
    """The file is no kubeconfig: unreadable, not YAML text, or not of a kubeconfig's shape."""


def load_kubeconfig(path: str) -> KubeConfig:
    """The kubeconfig at `path`; raises NotAKubeconfig (a usage error) with one line, which
    the caller prefixes with the path."""
    from lightkube.config.kubeconfig import KubeConfig

    return KubeConfig.from_dict(read_kubeconfig(path), fname=path)


def read_kubeconfig(path: str) -> dict[str, Any]:
    """The kubeconfig's document, its shape checked; raises NotAKubeconfig."""
    import yaml

    try:
        raw = read_regular(path, MAX_KUBECONFIG_BYTES)
    except FileNotFoundError:
        raise NotAKubeconfig("no such file") from None
    except FileRefused as exc:
        raise NotAKubeconfig(f"not a kubeconfig: {exc}") from None
    except OSError as exc:
        raise NotAKubeconfig(exc.strerror or str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotAKubeconfig("not a kubeconfig: not UTF-8 text (a binary file?)") from None
    if nesting_depth(text) > MAX_NESTING:
        raise NotAKubeconfig(f"not a kubeconfig: nested deeper than {MAX_NESTING} levels")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise NotAKubeconfig(f"not a kubeconfig: {where}{problem}") from None
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise NotAKubeconfig(f"not a kubeconfig: {type(exc).__name__}") from None
    problem = shape_problem(doc)
    if problem is not None:
        raise NotAKubeconfig(f"not a kubeconfig: {problem}")
    assert isinstance(doc, dict)
    return doc


def shape_problem(doc: Any) -> str | None:
    """What keeps `doc` from being a kubeconfig lightkube can read, or None."""
    if not isinstance(doc, dict):
        return f"a YAML {_kind(doc)}, not a mapping"
    for key, body in NAMED_LISTS.items():
        if key not in doc or doc[key] is None:
            if key in REQUIRED_LISTS:
                return f"no {key!r} list"
            continue
        entries = doc[key]
        if not isinstance(entries, list):
            return f"{key!r} is a {_kind(entries)}, not a list"
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                return f"{key}[{i}] is a {_kind(entry)}, not a mapping"
            if not isinstance(entry.get("name"), str):
                return f"{key}[{i}] has no name"
            if not isinstance(entry.get(body), dict):
                return f"{key}[{i}] ({entry['name']}) has no {body!r} mapping"
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        return f"'current-context' is a {_kind(current)}, not a name"
    return None


def _kind(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "list"}
    if value is None:
        return "null"
    return names.get(type(value), "mapping" if isinstance(value, dict) else type(value).__name__)
