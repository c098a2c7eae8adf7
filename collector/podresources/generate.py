"""Generate the pod-resources API's Python modules from `api.proto` with grpcio-tools.

    python -m collector.podresources.generate           # rewrite api_pb2.py, api_pb2.pyi, api_pb2_grpc.py
    python -m collector.podresources.generate --check   # exit 1 when they differ from a fresh run

grpcio-tools is a dev dependency pinned to one version (pyproject.toml): another version writes other
version checks into the files, so regenerate with the pinned one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from core.generated import stale, write

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("collector/podresources/api.proto")
"""Relative to the repository root, which is protoc's include path: the generated gRPC module then
imports `collector.podresources.api_pb2` (protoc names imports after the proto's path)."""
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate() -> dict[Path, str]:
    """The generated files (path relative to the repository root -> text), from a fresh protoc run."""
    with tempfile.TemporaryDirectory(prefix="gpuhealth-protoc-") as out:
        cmd = [
            sys.executable, "-m", "grpc_tools.protoc", "-I.",
            f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", str(PROTO),
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"protoc failed ({' '.join(cmd)}): {proc.stderr.strip()}")
        return {PROTO.parent / name: (Path(out) / PROTO.parent / name).read_text() for name in OUTPUTS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the pod-resources API's Python modules from api.proto.")
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = parser.parse_args(argv)
    outputs = generate()
    if args.check:
        old = stale(outputs, ROOT)
        for path in old:
            print(f"stale: {path} (run python -m collector.podresources.generate)", file=sys.stderr)
        return 1 if old else 0
    for path in write(outputs, ROOT):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
