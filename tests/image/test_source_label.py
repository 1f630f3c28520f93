"""The image's org.opencontainers.image.source label names where a reader can fetch the
source: the `origin` remote as an https URL, never a local path a CI checkout clones from."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from built_image import BUILD


def build_image() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("build_image", str(BUILD))
    spec = importlib.util.spec_from_loader("build_image", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("remote", "label"),
    [
        ("https://github.com/acme/gpuprobe.git", "https://github.com/acme/gpuprobe.git"),
        ("git@github.com:acme/gpuprobe.git", "https://github.com/acme/gpuprobe.git"),
        ("https://ci:s3cret@git.acme.io/gpuprobe", "https://git.acme.io/gpuprobe"),
        ("/check/repo.git", "https://gpuprobe.example/source"),
        ("file:///srv/git/gpuprobe.git", "https://gpuprobe.example/source"),
        (None, "https://gpuprobe.example/source"),
    ],
)
def test_the_source_label_is_a_fetchable_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remote: str | None, label: str
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    if remote is not None:
        subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", remote], check=True)
    module = build_image()
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.source_url() == label
