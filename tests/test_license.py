"""The LICENSE file is the licence pyproject.toml declares."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_the_license_file_is_pyprojects_license() -> None:
    """LICENSE is the licence pyproject.toml names (Apache-2.0: the Apache License 2.0's text,
    as the image's licenses label says)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
