"""The agent daemon (`gpuprobe serve`): scheduler, gRPC service, Prometheus metrics.

The package itself imports nothing heavy: the servers are imported only by `gpuprobe serve`.
What it shares with the client library (the wire conversion, reading credentials) lives
below both, in `gpuprobe.wire` and `gpuprobe.credentials`.
"""
