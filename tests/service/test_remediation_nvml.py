"""The remediation loop with the node agent on the NVML test double: a GPU with a pending row remap is reset
at idle (refused while a process runs, NVML's own error), verified by its probes and returned; a probe that
fails sends it to RMA. The loop, the agent (in-process) and the double, only the probe child stood in."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from predictor.policy import decision_changes
from service.actuator import Actuator, ActuatorConfig
from service.remediation import RemediationConfig
from service.remedy_tasks import LocalRemedies
from store import Store
from tests.collector.test_remediate import idle, nvml_agent
from tests.collector.test_remedy import COMPUTE, REMAP, UUIDS
from tests.collector.test_remedy import faulty_h100s as h100s
from tests.fleet_decisions import MODEL, T0, Clock
from tests.service.test_remediation import REMAP as REMAP_REMEDY
from tests.service.test_remediation import sample

HOST = "node-01"
MIN = timedelta(minutes=1)


def setup(store: Store) -> tuple[Actuator, Clock]:
    store.gpus.upsert([{"uuid": u, "hostname": HOST, "gpu_index": i, "model_name": MODEL, "seen_at": T0}
                       for i, u in enumerate(UUIDS)])  # fmt: skip
    d, remedy, when, line = REMAP_REMEDY
    store.decisions.write_scores(
        [{"gpu_uuid": UUIDS[0], "hostname": HOST, "model_name": MODEL, "risk": 0.1, "decision": d,
          "reasons": [line], "remedy": remedy, "remedy_when": when}], T0, rule=decision_changes)  # fmt: skip
    clock = Clock(T0)
    config = ActuatorConfig(mode="on", breaker=BreakerPolicy(1.0, 100), remediation=RemediationConfig())
    return Actuator(store, MemoryTarget(lambda: [HOST]), config, now=clock), clock


def test_a_pending_remap_is_reset_when_idle_verified_and_returned(store: Store, tmp_path: Path) -> None:
    act, clock = setup(store)
    fake = h100s()
    fake.gpu(0).values[COMPUTE] = [4242]
    agent = nvml_agent(LocalRemedies(store, act.remediator, clock), fake, tmp_path)  # type: ignore[arg-type]
    act.reconcile_once()
    (r,) = store.remediations.open()
    agent.run_once()  # a job on the GPU: refused, nothing touched
    assert fake.gpu(0).resets == 0
    r = store.remediations.get(r["id"])
    assert r["stage"] == "remedy" and "1 process(es) on the GPU (pid 4242)" in (r["detail"] or "")
    fake.gpu(0).values[COMPUTE] = []  # the job ended
    idle(fake, 0)
    clock.t += MIN
    agent.run_once()  # reset (the remap applies), then verify on the next round
    assert fake.gpu(0).resets == 1 and fake.gpu(0).values[REMAP][2] == 0
    assert store.remediations.get(r["id"])["stage"] == "verify"
    agent.run_once()
    assert store.remediations.get(r["id"])["verified"]["result"] == "done"  # type: ignore[index]
    clock.t += MIN
    sample(store, clock.t, HOST, 0, uuid=UUIDS[0], row_remap_pending=float(fake.gpu(0).values[REMAP][2]))
    act.reconcile_once()
    assert store.remediations.get(r["id"])["result"] == "returned"


def test_a_failed_probe_after_the_reset_is_an_rma(store: Store, tmp_path: Path) -> None:
    act, clock = setup(store)
    fake = h100s()
    idle(fake, 0)
    agent = nvml_agent(LocalRemedies(store, act.remediator, clock), fake, tmp_path, status={"memtest": "fail"})  # type: ignore[arg-type]
    act.reconcile_once()
    agent.run_once()
    agent.run_once()
    (r,) = store.remediations.open()
    assert r["verified"] is not None and r["verified"]["result"] == "failed"
    clock.t += MIN
    sample(store, clock.t, HOST, 0, uuid=UUIDS[0])
    act.reconcile_once()
    r = store.remediations.get(r["id"])
    assert r["result"] == "rma" and "memtest" in (r["detail"] or ""), r["detail"]
