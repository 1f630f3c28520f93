"""`python -m gpuprobe` runs the command line."""

from gpuprobe.cli import main

raise SystemExit(main())
