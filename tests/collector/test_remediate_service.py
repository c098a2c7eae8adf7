"""The node agent against the service itself: the remediation loop's routes on uvicorn, over a loopback socket.

The NVML test double on the agent's side (its stand-in nvidia-smi resets it; a stand-in probe child
verifies it), the actuator with the in-memory scheduler on the service's: a pending remap's reset is
refused while a job runs, done once the GPU is idle, verified, and the GPU returned.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from api.app import ApiConfig, create_app
from collector.backends.nvml import NvmlBackend
from collector.backends.nvml_reset import NvidiaSmi, NvmlReset
from collector.probes import SubprocessProbeRunner
from collector.remediate import RemedyAgent
from collector.remedy import Resetter
from collector.verify import Verifier
from core.remedies import RemedyReport
from core.service_client import HttpRemedies
from store import Store
from tests.api.live import live_server
from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml
from tests.collector.backends.fake_reset import FakeNvidiaSmi
from tests.collector.test_remediate import PROBES, child
from tests.collector.test_remedy import COMPUTE, REMAP
from tests.fleet_decisions import uuid_of
from tests.service.test_remediation import REMAP as REMAP_DECISION
from tests.service.test_remediation import T0, make, sample, score

TOKEN = "the-services-write-token"
HOST = "node-2"


def node_2(tmp_path: Path) -> tuple[FakeNvml, Callable[[str], RemedyAgent]]:
    """node-2's two GPUs in the NVML double, GPU 1 with a pending row remap; and an agent for them, given the URL."""
    gpus = [FakeGpu(uuid_of(HOST, i), pci_bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(2)]
    fake = FakeNvml(gpus)
    fake.gpu(1).values[REMAP] = (3, 1, 1, 0)
    backend = NvmlBackend(HOST, nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    smi = NvidiaSmi("nvidia-smi", 30.0, FakeNvidiaSmi(fake))  # type: ignore[arg-type]
    resetter = Resetter(NvmlReset(backend, smi), allow=True)
    verifier = Verifier(backend, SubprocessProbeRunner(command=child(tmp_path)), PROBES)

    def agent(url: str) -> RemedyAgent:
        return RemedyAgent(HttpRemedies(url, token=TOKEN), backend, resetter=resetter, verifier=verifier)

    return fake, agent


def test_a_pending_remap_reset_at_idle_verified_and_returned_over_http(store: Store, tmp_path: Path) -> None:
    act, _, clock = make(store)
    score(store, T0, {(HOST, 1): REMAP_DECISION})
    act.reconcile_once()
    fake, agent_for = node_2(tmp_path)
    fake.gpu(1).values[COMPUTE] = [4242]
    with live_server(create_app(store, ApiConfig(token=TOKEN, actuator=act))) as url:
        agent = agent_for(url)
        assert agent.run_once() == 1  # the reset is refused while the job runs, and stays asked for
        assert fake.gpu(1).resets == 0
        fake.gpu(1).values[COMPUTE] = []
        fake.gpu(1).values[("nvmlDeviceGetUtilizationRates",)] = (0, 0)
        assert agent.run_once() == 1  # now done: the remap is applied
        assert fake.gpu(1).resets == 1 and fake.gpu(1).values[REMAP][2] == 0
        assert agent.run_once() == 1  # the verify task the report moved it to: the probes pass
        assert agent.run_once() == 0  # nothing left to do until the service judges
        clock.t += timedelta(minutes=1)
        sample(store, clock.t, HOST, 1)
        act.reconcile_once()
    assert agent.stats().tasks == {("reset", "refused"): 1, ("reset", "done"): 1, ("verify", "done"): 1}
    assert agent.stats().reports == {"taken": 3}
    (row,) = store.remediations.page(hostname=HOST, open_only=False, limit=10, offset=0)[0]
    assert row["result"] == "returned", row
    assert [p["probe"] for p in row["verified"]["probes"]] == ["gemm", "memtest"]


def test_a_report_for_a_task_that_moved_on_is_answered_409_and_dropped(store: Store, tmp_path: Path) -> None:
    act, _, _ = make(store)
    score(store, T0, {(HOST, 1): REMAP_DECISION})
    act.reconcile_once()
    fake, agent_for = node_2(tmp_path)
    fake.gpu(1).values[("nvmlDeviceGetUtilizationRates",)] = (0, 0)
    with live_server(create_app(store, ApiConfig(token=TOKEN, actuator=act))) as url:
        client = HttpRemedies(url, token=TOKEN)
        (task,) = client.tasks(HOST)
        agent_for(url).run_once()  # reset done and taken: the remediation moves on to verify
        late = RemedyReport("reset", "done", "a second agent's report", task.gpu_uuid, 1.0)
        assert client.report(task.remediation_id, late) is False
        assert [t.do for t in client.tasks(HOST)] == ["verify"]
