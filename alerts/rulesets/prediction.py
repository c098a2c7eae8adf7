"""The service's verdicts: the model's failure risk, the policy's decisions, and its node findings."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series, service_labels, service_target
from alerts.rulesets.common import GPU, GROUP_PREDICTION, HOST, ON_GPU, WHO, fmt, value
from core.labels import HOSTNAME

RISK = "gpuhealth_risk"
DECISION = "gpuhealth_decision"
NODE_COOLING = "gpuhealth_node_cooling_suspected"
P_RISK = service_labels(0, mode="overall")
_OVERALL = f'{RISK}{{mode="overall"}}'
_RMA = service_labels(0, decision="rma")
_DRAIN = service_labels(0, decision="drain")
_DEMOTED = f'{DECISION}{{decision=~"demote|drain|rma"}} == 1'
"""The policy's decision is demote or worse: a risk it held at watch (a hot node's heat) is no demote."""
_ON_GPU = f"on ({', '.join(c.GPU_KEY)})"
_NODE = {HOSTNAME: "node-a", **service_target()}
"""The labels of the service's per-node series (the node, the service's job and instance)."""


def _demote_case() -> Case:
    """GPU 0: risk past demote and the policy demotes it; GPU 1: risk past demote held at watch (a hot node)."""
    demoted, held = P_RISK, service_labels(1, mode="overall")
    g0, g1 = service_labels(0), service_labels(1)
    return Case(
        series=(
            (series(RISK, demoted), "0.5x10 0.82x30"),
            (series(DECISION, {**g0, "decision": "watch"}), "1x10 0x30"),
            (series(DECISION, {**g0, "decision": "demote"}), "0x10 1x30"),
            (series(RISK, held), "0.85x40"),
            (series(DECISION, {**g1, "decision": "watch"}), "1x40"),
            (series(DECISION, {**g1, "decision": "demote"}), "0x40"),
        ),
        quiet_at="20m",
        fire_at="30m",
        value=0.82,
        labels=(demoted,),
    )


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuRiskWatch",
        group=GROUP_PREDICTION,
        expr=f"{_OVERALL} >= {fmt(c.RISK_WATCH)}",
        for_=c.RISK_FOR,
        severity="info",
        action="watch",
        summary=f"GPU failure risk elevated on {ON_GPU}",
        description=f"{WHO} has a predicted failure risk of {value('%.2f')} (watch at {fmt(c.RISK_WATCH)}).",
        case=Case.single(RISK, P_RISK, "0.1x10 0.45x30", quiet_at="20m", fire_at="30m", value=0.45),
        meaning="The model's calibrated probability that this GPU fails within 7 days passed the watch threshold "
        "(a policy choice, GPUHEALTH_WATCH_THRESHOLD).",
        check=(
            "The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>` (risk per mode and what drives it).",
            "The GPU detail dashboard, panel *Risk per mode*.",
        ),
        act=("Watch: nothing to do now; the alert escalates to GpuRiskDemote if the risk keeps rising.",),
    ),
    Alert(
        name="GpuRiskDemote",
        group=GROUP_PREDICTION,
        expr=f"{_OVERALL} >= {fmt(c.RISK_DEMOTE)}\nand {_ON_GPU}\n{_DEMOTED}",
        for_=c.RISK_FOR,
        severity="warning",
        action="demote",
        summary=f"GPU failure risk high on {ON_GPU}: demote",
        description=f"{WHO} has a predicted failure risk of {value('%.2f')} (demote at {fmt(c.RISK_DEMOTE)}): "
        "interruptible, checkpointed work only.",
        case=_demote_case(),
        meaning="The product brief's 'warning': risk > 0.7. The GPU should run only interruptible, checkpointed "
        "training, never latency-critical inference, and be diagnosed in the next maintenance window. The alert "
        "also needs the policy's decision to be demote (or worse): the policy demotes once the risk has held "
        "3 hours, 12 where its riskiest head is ECC (GPUHEALTH_DEMOTE_FOR, _FOR_ECC, _FOR_PCIE for PCIe; "
        "until then a watch saying "
        "since when), and where a node's GPUs all run "
        "hot it holds a thermal risk at watch (the node's cooling, GpuNodeCoolingSuspected, not the GPU), unless "
        "the GPU runs hotter than the rest of its node or its memory-core gap has widened beyond its own past.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",),
        act=("Demote the GPU's node (see below) and schedule `dcgmi diag -r 3 -i <gpu>`.",),
    ),
    Alert(
        name="GpuDecisionDrain",
        group=GROUP_PREDICTION,
        expr='gpuhealth_decision{decision="drain"} == 1',
        for_="1m",
        severity="critical",
        action="drain",
        summary=f"gpuhealth decided to drain {HOST} (GPU {GPU})",
        description=f"{WHO} has the decision `drain`: an imminent failure signal (off the bus, uncontained ECC, "
        "a remap waiting for a reset).",
        case=Case(
            series=(
                (series("gpuhealth_decision", _DRAIN), "0x5 1x5"),
                (series("gpuhealth_decision", service_labels(0, decision="ok")), "1x5 0x5"),
            ),
            quiet_at="5m",
            fire_at="8m",
            value=1,
            labels=(_DRAIN,),
        ),
        meaning="gpuhealth's policy turned imminent signals into a drain decision.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",),
        act=("Drain the node (see below), then follow the reason's own runbook.",),
    ),
    Alert(
        name="GpuDecisionRma",
        group=GROUP_PREDICTION,
        expr='gpuhealth_decision{decision="rma"} == 1',
        for_="1m",
        severity="critical",
        action="rma",
        summary=f"gpuhealth decided {ON_GPU} needs an RMA",
        description=f"{WHO} meets NVIDIA's documented RMA criteria (remap failure, retired-page limit, repeated "
        "XID 48/79).",
        case=Case.single("gpuhealth_decision", _RMA, "0x5 1x5", quiet_at="5m", fire_at="8m", value=1),
        meaning="The rule engine (not the model) found an RMA criterion.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`; `dcgmi diag -r 3 -i <gpu>`.",),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure for what to attach).",),
    ),
    Alert(
        name="GpuNodeCoolingSuspected",
        group=GROUP_PREDICTION,
        expr=f"{NODE_COOLING} == 1",
        for_=c.RISK_FOR,
        severity="warning",
        action="watch",
        summary=f"The GPUs of {HOST} run hot together: check the node's cooling",
        description=f"Most GPUs of {HOST} run hotter than their power explains, well above their own 30 days, all "
        "at once: a node-wide heat episode (fans, airflow, the rack's cooling), not failing GPUs. Its GPUs are "
        "on watch with the reason `node-wide heat: check cooling`.",
        case=Case.single(NODE_COOLING, _NODE, "0x10 1x30", quiet_at="20m", fire_at="30m", value=1),
        meaning="gpuhealth's policy found a node-wide heat episode: at least half of the node's GPUs (and at "
        "least 2) run 2 σ or more hotter than their power explains, compared with their own last 30 days, and "
        "the node's median is 3 σ or more (`predictor/node.py`). When a node's fans or its rack's cooling fail, "
        "every GPU of it heats up together; that is a finding about the node, so its GPUs get `watch` instead "
        "of a thermal demote each. A GPU that runs hotter than the rest of its node, or whose memory-core "
        "temperature gap is 3 σ wider than its own last 30 days (the node's air moves core and memory together; "
        "a failing heat sink widens the gap), keeps its own demote (GpuRiskDemote), "
        "and GPUs past their temperature limits keep their own alerts (GpuTemperatureHigh, "
        "GpuThermalThrottling).",
        check=(
            "Which GPUs of the node and by how much: `curl -s http://127.0.0.1:8080/v1/nodes/<Hostname>` "
            "(each GPU's decision and reasons; the node dashboard shows their temperatures side by side).",
            "The fans and the inlet air, on the node's BMC: `ipmitool sdr type Fan` (a fan at 0 RPM, or far "
            "below its neighbours, or in a failed state) and `ipmitool sdr type Temperature` (inlet or ambient "
            "temperature above the server's specification, usually 35 °C).",
            "The GPUs on the node: `nvidia-smi -q -d TEMPERATURE,PERFORMANCE` (every GPU's temperature against "
            "its slowdown and shutdown limits, and whether *HW Slowdown* or *SW Thermal Slowdown* is active).",
            "The rack neighbours: do the nodes above and below (the same rack, the same cooling row) show the "
            "same rise? Several nodes at once point to the rack's or the room's cooling, one node to its fans or "
            "airflow (blanking panels, a blocked intake, a cable bundle in front of the fans).",
        ),
        act=(
            "Open a facilities or hardware ticket for the node (or its rack, when the neighbours run hot too) "
            "with the fan and inlet readings above: fans, fan controller, airflow, the rack's cooling.",
            "Do not RMA or drain the GPUs for this: they are hot because the node is. Once the cooling is "
            "fixed, their temperatures fall back and the finding clears by itself.",
            "If a GPU reaches its slowdown temperature before the repair, GpuTemperatureHigh or "
            "GpuThermalThrottling fire for it; move latency-critical work off the node meanwhile if they do.",
        ),
    ),
)
