"""The agent daemon's faces (`gpuprobe serve`): the gRPC service, `/metrics` and the health pages;
the daemon they answer from (scheduler, store, event path) is `gpuprobe.daemon`.

The package itself imports nothing heavy: the servers are imported only by `gpuprobe serve`.
What it shares with the client library (the wire conversion, reading credentials) lives
below both, in `gpuprobe.wire` and `gpuprobe.credentials`.
"""
