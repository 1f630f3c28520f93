"""The committed synthetic snapshots are exactly what synthesize.py writes: never hand-edited."""

from __future__ import annotations

import filecmp
import importlib.util
import sys
from pathlib import Path

from conftest import SNAPSHOTS


def load_synthesize():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("synthesize", SNAPSHOTS / "synthesize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["synthesize"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def differences(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b)
    found = [str(a / n) for n in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files]
    for sub in cmp.common_dirs:
        found += differences(a / sub, b / sub)
    return found


def test_committed_synthetic_snapshots_match_their_generator(tmp_path: Path) -> None:
    synthesize = load_synthesize()
    synthesize.main(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in SNAPSHOTS.glob("synthetic-*"))
    assert written == committed
    for name in written:
        assert differences(tmp_path / name, SNAPSHOTS / name) == [], (
            f"{name} differs: run python tests/snapshots/synthesize.py"
        )
