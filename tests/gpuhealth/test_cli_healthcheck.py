"""`gpuhealth slurm-healthcheck` against a service that answers badly.

Exit 1 tells slurmd's HealthCheckProgram caller that the node was drained; a service that
cannot be asked (slow, oversized, malformed) must be exit 2, in one line, well within the
60 s slurmd gives the program.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.core.test_service_client import NESTED, Answer, StubService, node_body, raw_node
from tests.gpuhealth.test_cli_actuate import gpuhealth


@pytest.fixture
def stub() -> Iterator[StubService]:
    with StubService() as s:
        yield s


def healthcheck(stub: StubService) -> tuple[int, str, float]:
    t0 = time.monotonic()
    proc = gpuhealth("slurm-healthcheck", "--service-url", stub.url, "--node", "node-a")
    return proc.returncode, proc.stderr, time.monotonic() - t0


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_dripping_service_ends_within_the_deadline(stub: StubService) -> None:
    stub.answer = Answer(body=node_body(), drip_s=1.0)  # ~150 bytes: 150 s without one deadline
    code, stderr, took = healthcheck(stub)
    assert code == 2 and "no answer within 5s" in one_line(stderr)
    assert took < 30  # 5 s of deadline plus the interpreter's start on a busy machine


@pytest.mark.parametrize(
    ("body", "needle"),
    [(raw_node(risk="9" * 400), "gpus[0].risk 999"), (NESTED, "not JSON"), (raw_node(risk="1e308"), "not a number")],
    ids=["risk-400-digits", "nested", "risk-1e308"],
)
def test_a_hostile_answer_is_could_not_ask_not_drain(stub: StubService, body: bytes, needle: str) -> None:
    stub.answer = Answer(200, body)
    code, stderr, _ = healthcheck(stub)
    line = one_line(stderr)
    assert code == 2 and line.startswith("error: slurm-healthcheck: ") and needle in line
