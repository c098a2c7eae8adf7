"""The service's verdicts: the model's failure risk and the policy's decisions."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series, service_labels
from alerts.rulesets.common import GPU, GROUP_PREDICTION, HOST, ON_GPU, WHO, fmt, value

RISK = "gpuhealth_risk"
P_RISK = service_labels(0, mode="overall")
_OVERALL = f'{RISK}{{mode="overall"}}'
_RMA = service_labels(0, decision="rma")
_DRAIN = service_labels(0, decision="drain")

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
        expr=f"{_OVERALL} >= {fmt(c.RISK_DEMOTE)}",
        for_=c.RISK_FOR,
        severity="warning",
        action="demote",
        summary=f"GPU failure risk high on {ON_GPU}: demote",
        description=f"{WHO} has a predicted failure risk of {value('%.2f')} (demote at {fmt(c.RISK_DEMOTE)}): "
        "interruptible, checkpointed work only.",
        case=Case.single(RISK, P_RISK, "0.5x10 0.82x30", quiet_at="20m", fire_at="30m", value=0.82),
        meaning="The product brief's 'warning': risk > 0.7. The GPU should run only interruptible, checkpointed "
        "training, never latency-critical inference, and be diagnosed in the next maintenance window.",
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
)
