"""`gpuhealth collect --service-url … --service-token …`: remedies on by default, flag errors, a real run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from collector.backends.sim import SimBackend
from core.remedies import RemedyTask
from tests.api.live import free_port
from tests.core.http_stub import Answer, StubService
from tests.gpuhealth.test_cli import _gpuhealth, _one_line_error

TOKEN = "svc-write-token"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--remedies"], "--remedies needs --service-url: the central gpuhealth serve"),
        (["--remedies", "--service-url", "http://g:8080"], "--remedies needs --service-token"),
        (["--service-url", "http://g:8080", "--service-token", "t", "--reboot-sentinel", "/nope/reboot-required"],
         "--reboot-sentinel /nope/reboot-required: no folder /nope"),
        (["--service-url", "g:8080"], "use an http:// or https:// URL"),
    ],
)  # fmt: skip
def test_bad_remedy_flags_give_one_line_errors(args: list[str], needle: str) -> None:
    _one_line_error(_gpuhealth("collect", "--backend", "sim", "--listen", "127.0.0.1:0", *args), needle)


def run_collect(stub: StubService, posts: int, *args: str, env: dict[str, str]) -> tuple[str, str]:
    """Run `gpuhealth collect` on a simulated node until the stub got `posts` reports; (its /metrics, its stderr)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "sim", "--sim-gpus", "4",
         "--listen", f"127.0.0.1:{port}", "--service-url", stub.url, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while sum(r.method == "POST" for r in stub.seen) < posts and proc.poll() is None:
            assert time.monotonic() < deadline, "no reports within 30 s"
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return metrics, err


def test_collect_carries_out_the_services_tasks_and_reports_them(tmp_path: Path) -> None:
    g = SimBackend(nodes=1, gpus_per_node=4, seed=0).gpus()[2]  # the collector's sim: the same UUIDs
    sentinel = tmp_path / "reboot-required"
    tasks = [
        RemedyTask(21, g.hostname, g.uuid, 2, "reboot", "XID 79, fallen off the bus").to_dict(),
        RemedyTask(22, g.hostname, g.uuid, 2, "reset", "pending row remap").to_dict(),
    ]
    with StubService() as stub:
        stub.answer = Answer(200, {"remediation": {"id": 21}})
        stub.answers[f"/v1/nodes/{g.hostname}/remedies"] = Answer(body={"hostname": g.hostname, "tasks": tasks})
        metrics, err = run_collect(
            stub, 2, "--allow-reset", "--reboot-sentinel", str(sentinel), env={"GPUHEALTH_SERVICE_TOKEN": TOKEN}
        )
    asked = [r for r in stub.seen if r.method == "GET"]
    posted = {r.path: r for r in stub.seen if r.method == "POST"}
    assert asked[0].path == f"/v1/nodes/{g.hostname}/remedies"
    assert sorted(posted) == ["/v1/remediations/21/report", "/v1/remediations/22/report"]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in posted.values())
    reboot = json.loads(posted["/v1/remediations/21/report"].body)
    assert (reboot["do"], reboot["result"], reboot["detail"]) == (
        "reboot",
        "done",
        f"asked kured for a reboot: wrote {sentinel}",
    )
    assert sentinel.read_text().endswith("remediation 21: XID 79, fallen off the bus\n")
    reset = json.loads(posted["/v1/remediations/22/report"].body)
    # the simulated GPU may be busy with its workload: then refused, nothing touched
    assert (reset["result"], reset["gpu_uuid"]) in (("done", g.uuid), ("refused", g.uuid)), reset
    assert reset["result"] == "done" or "process(es) on the GPU" in reset["detail"]
    assert 'gpuhealth_agent_remedy_tasks_total{do="reboot",result="done"} 1.0' in metrics
    assert 'gpuhealth_agent_remedy_reports_total{outcome="taken"} 2.0' in metrics
    assert (
        f"remedies: from {stub.url} every 30s; reset allowed, reboot through {sentinel}, verify"
        " gemm,memtest,bandwidth,pcie" in err
    )


def test_without_a_token_remedies_stay_off_and_the_start_up_says_why() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "sim", "--sim-gpus", "1",
         "--listen", "127.0.0.1:0", "--service-url", "http://127.0.0.1:9"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "GPUHEALTH_SERVICE_TOKEN"},
    )  # fmt: skip
    try:
        time.sleep(3)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert "remedies: off: no --service-token (the service's write token) to report with" in err, err
