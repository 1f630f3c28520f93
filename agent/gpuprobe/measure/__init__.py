"""Active measurements: they load the node (disk, network) within stated bounds in time and
bytes, and remove whatever they create on every path out."""
