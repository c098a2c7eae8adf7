"""`gpuhealth collect --nfd-features-dir … --service-url …`: flag errors and a real run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from collector.nfd import FILE_NAME
from tests.api.live import free_port
from tests.core.test_service_client import Answer, StubService, gpu_body, node_body
from tests.gpuhealth.test_cli import _gpuhealth, _one_line_error


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nfd-features-dir", "{d}"], "--nfd-features-dir needs --service-url"),
        (["--nfd-features-dir", "{d}", "--service-url", "gpuhealth:8080"], "use an http:// or https:// URL"),
        (["--nfd-features-dir", "{d}/nope", "--service-url", "http://g:8080"], "nope: no such directory"),
        (["--nfd-features-dir", "{d}", "--service-url", "http://g:8080", "--nfd-interval", "soon"],
         "--nfd-interval: invalid duration 'soon'"),
        (["--nfd-features-dir", "{d}", "--service-url", "http://g:8080", "--sim-nodes", "2"],
         "the sim backend reports 2 hosts (sim-node-00, sim-node-01); run one collector per node"),
    ],
)  # fmt: skip
def test_bad_nfd_flags_give_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    _one_line_error(_gpuhealth("collect", "--backend", "sim", "--listen", "127.0.0.1:0", *args), needle)


def test_collect_writes_the_feature_file_and_exports_its_series(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    port = free_port()
    with StubService() as svc:
        svc.answer = Answer(body=node_body("sim-node-00", [gpu_body(0, "ok", 0.1), gpu_body(5, "drain", 0.42)]))
        env = {**os.environ, "GPUHEALTH_SERVICE_TOKEN": "node-token"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "sim", "--sim-gpus", "8",
             "--listen", f"127.0.0.1:{port}", "--nfd-features-dir", str(features), "--service-url", svc.url,
             "--nfd-interval", "1s", "--no-remedies"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            path = features / FILE_NAME
            deadline = time.monotonic() + 30
            while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert path.exists(), proc.stderr.read() if proc.poll() is not None else "no file within 30 s"
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# +expiry-time=")
    assert lines[1:] == ["gpuhealth.io/decision=drain", "gpuhealth.io/risk-bucket=4", "gpuhealth.io/gpu=5"]
    assert svc.seen[0].path == "/v1/nodes/sim-node-00"
    assert svc.seen[0].headers["authorization"] == "Bearer node-token"
    assert 'gpuhealth_nfd_errors_total{stage="service"} 0.0' in metrics
    assert "gpuhealth_nfd_writes_total 1.0" in metrics
    assert f"labels:  {path} (NFD), node sim-node-00 from {svc.url} every 1s" in err
    assert proc.returncode == 0, err
