"""The NFD labeler against a service that answers badly: slowly, or with what is not a node.

Each such round is a counted `service` error that leaves the last file in place, and the next
round runs on time: the labels never expire silently behind a hung thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.nfd import FILE_NAME, NfdConfig, NfdLabeler
from tests.core.test_service_client import Answer, StubService, gpu_body, node_body, raw_node


@pytest.fixture
def stub() -> Iterator[StubService]:
    with StubService() as s:
        yield s


def test_a_dripping_service_is_a_counted_error_within_the_timeout(tmp_path: Path, stub: StubService) -> None:
    stub.answer = Answer(body=node_body(), drip_s=0.5)
    lab = NfdLabeler(NfdConfig(tmp_path, stub.url, "node-a", timeout_s=1.0))
    t0 = time.monotonic()
    assert not lab.run_once()
    assert time.monotonic() - t0 < 2.0
    assert lab.stats().errors == {"service": 1, "write": 0}
    assert not (tmp_path / FILE_NAME).exists()


@pytest.mark.parametrize("risk", ["1e308", "9" * 400, "-1", "NaN"])
def test_a_hostile_risk_is_a_counted_error_and_the_file_stays(tmp_path: Path, stub: StubService, risk: str) -> None:
    stub.answer = Answer(body=node_body(gpus=[gpu_body(0, "drain", 0.8)]))
    lab = NfdLabeler(NfdConfig(tmp_path, stub.url, "node-a", timeout_s=2.0))
    assert lab.run_once()
    before = (tmp_path / FILE_NAME).read_text()
    assert "gpuhealth.io/risk-bucket=8" in before
    stub.answer = Answer(body=raw_node(risk=risk))
    assert not lab.run_once()
    assert lab.stats().errors == {"service": 1, "write": 0}
    assert (tmp_path / FILE_NAME).read_text() == before
