"""The kernel journal: the kernel log's records (`/dev/kmsg`, journald, the log files), each
read once and parsed once into the typed events the vendors' parsers register, kept per boot
with cursors (see docs/architecture.md, "The kernel journal")."""
