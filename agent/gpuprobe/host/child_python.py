"""How gpuprobe starts a Python module of its own in a child process, isolated.

`python -m module` and `python -c code` put the working directory first on the import path:
run as root from /tmp, a `gpuprobe/__init__.py` planted there would run instead of the
package. A child is started isolated (`-I`: no working directory, script directory or user
site on the path, no PYTHON* variables), with the package's own root appended to the path so
it finds gpuprobe where the parent found it (the installed one first where it is installed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gpuprobe

# The directory holding the package the parent runs (site-packages, or agent/ in a checkout).
PACKAGE_ROOT = Path(gpuprobe.__file__).resolve().parent.parent
# The child's first code: take the root and the module off its argv, then run the module as
# `__main__` with the rest of argv as its own.
_BOOT = (
    "import runpy, sys; root, module = sys.argv[1:3]; del sys.argv[1:3]; "
    "sys.path.append(root); runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_command(module: str, *args: str) -> list[str]:
    """The command that runs `module` (`gpuprobe.host.rocm_smi`) as `__main__` with `args`,
    in this interpreter, isolated from the working directory and the environment."""
    return [sys.executable, "-I", "-c", _BOOT, str(PACKAGE_ROOT), module, *args]
