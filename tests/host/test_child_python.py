"""gpuprobe's child Python processes never run code from the working directory (issue 41 item
9: a `gpuprobe/__init__.py` planted in /tmp ran as uid 0 when `gpuprobe check` or `audit` was
run from there: the ROCm SMI probe's `python -m` and the audit's `python -c` put the working
directory first on the import path)."""

from __future__ import annotations

import os
import pickle
import subprocess
import time
from pathlib import Path

import pytest

from gpuprobe.audit import shards
from gpuprobe.audit.fanout import Asking
from gpuprobe.audit.keys import data_keys
from gpuprobe.client import Credentials
from gpuprobe.host import rocm_smi
from gpuprobe.host.child_python import PACKAGE_ROOT, python_command
from gpuprobe.host.fs import HostFS
from gpuprobe.v1 import diagnostics_pb2 as pb


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding a package named gpuprobe that leaves a mark when it runs;
    the test runs from there. Returns where the mark would be."""
    work = tmp_path / "work"
    (work / "gpuprobe").mkdir(parents=True)
    mark = tmp_path / "planted-code-ran"
    (work / "gpuprobe" / "__init__.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(work)
    return mark


def test_the_rocm_smi_probe_runs_the_installed_module_not_the_planted_one(
    tmp_path: Path, planted: Path
) -> None:
    lib = tmp_path / "host/usr/lib"
    lib.mkdir(parents=True)
    (lib / rocm_smi.LIBRARY).write_text("not an ELF object\n")
    found = rocm_smi.probe(HostFS(tmp_path / "host"))
    # The package's own child ran (and found no library in that file), not the planted one.
    assert found == rocm_smi.SmiProbe(str(lib / rocm_smi.LIBRARY), "crashed: exit status 1")
    assert not planted.exists()


def test_the_audits_shard_process_runs_the_installed_module_not_the_planted_one(
    planted: Path,
) -> None:
    asking = Asking(Credentials(), 1.0, time.monotonic() + 1.0, 1, data_keys(),
                    pb.REPORT_VIEW_SUMMARY)  # fmt: skip
    done = subprocess.run(
        shards.helper_command(),
        input=pickle.dumps(([], asking, str)),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert pickle.loads(done.stdout) == []
    assert not planted.exists()


def test_the_command_is_isolated_and_names_the_packages_own_root() -> None:
    command = python_command("gpuprobe.host.rocm_smi", "/usr/lib/librocm_smi64.so.1")
    assert command[1:3] == ["-I", "-c"]
    assert command[4:] == [
        str(PACKAGE_ROOT),
        "gpuprobe.host.rocm_smi",
        "/usr/lib/librocm_smi64.so.1",
    ]
    assert (PACKAGE_ROOT / "gpuprobe" / "__init__.py").is_file()
    # PYTHONPATH and PYTHONSTARTUP cannot bring code in either (-I ignores PYTHON* variables).
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    probe = subprocess.run(
        python_command("gpuprobe.host.child_python"), env=env, capture_output=True, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
