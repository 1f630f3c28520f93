"""gpuprobe's image built by scripts/build-image, and what the tests read from it: the OCI
layout, the image configuration, the unpacked root filesystem (umoci), the SBOM."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import ROOT

BUILD = ROOT / "scripts" / "build-image"
# Downloads kept between builds (the script's default): a second build fetches only Debian's
# package lists.
CACHE = ROOT / "build" / "image-cache"


@dataclass
class Built:
    """One build: its archive, SBOM, manifest digest and how long it took."""

    archive: Path
    sbom: Path
    seconds: float
    output: str

    def index(self) -> dict[str, Any]:
        with tarfile.open(self.archive) as tar:
            f = tar.extractfile("index.json")
            assert f is not None
            found: dict[str, Any] = json.load(f)
            return found

    @property
    def digest(self) -> str:
        (manifest,) = self.index()["manifests"]
        digest: str = manifest["digest"]
        return digest

    @property
    def tag(self) -> str:
        (manifest,) = self.index()["manifests"]
        tag: str = manifest["annotations"]["org.opencontainers.image.ref.name"]
        return tag

    def blob(self, digest: str) -> dict[str, Any]:
        with tarfile.open(self.archive) as tar:
            f = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
            assert f is not None
            found: dict[str, Any] = json.load(f)
            return found

    def image_config(self) -> dict[str, Any]:
        """The OCI image configuration (its `config` object is what a runtime starts)."""
        manifest = self.blob(self.digest)
        return self.blob(manifest["config"]["digest"])

    def unpack(self, where: Path) -> Path:
        """The image as a runtime bundle (umoci unpack): where/bundle/rootfs."""
        layout = where / "layout"
        with tarfile.open(self.archive) as tar:
            tar.extractall(layout, filter="data")
        bundle = where / "bundle"
        subprocess.run(
            ["umoci", "unpack", "--image", f"{layout}:{self.tag}", str(bundle)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        return bundle


def build(out: Path, timeout: float = 1200) -> Built:
    """Run scripts/build-image OUT.tar as a user would (with the project's Python, as
    docs/deploy.md says)."""
    archive = out / "gpuprobe.tar"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(BUILD), str(archive), "--cache", str(CACHE)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    return Built(archive, out / "gpuprobe.cdx.json", seconds, done.stdout)
