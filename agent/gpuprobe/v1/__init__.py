"""Generated gRPC and protobuf code for gpuprobe.v1 (scripts/generate_proto.py)."""
