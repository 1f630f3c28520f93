"""Errors a user can cause: each ends in one clear line and exit status 64, never a traceback."""


class UsageError(Exception):
    """A bad flag, check name, config file or snapshot: the command cannot start."""


class SnapshotError(UsageError):
    """A snapshot file that cannot be read or breaks the snapshot format."""


class ConfigError(UsageError):
    """A gpuprobe configuration file that cannot be read or has a wrong key or type."""
