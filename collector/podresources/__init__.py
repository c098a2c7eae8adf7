"""The kubelet's pod-resources API (gRPC v1), generated from `api.proto` by `generate.py`.

`api.proto` is the kubelet's own file (k8s.io/kubelet, Apache-2.0); `api_pb2.py`, `api_pb2.pyi`
and `api_pb2_grpc.py` are generated from it with grpcio-tools (the dev extra):
`python -m collector.podresources.generate` rewrites them, `--check` says whether they are stale.
`collector.attribution` is the client.
"""
