"""The service's remediations (service.remediation): one stuck past its deadline, verification escalating many."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series, service_target
from alerts.rulesets.common import GROUP_REMEDIATION, VALUE, fmt, label
from alerts.rulesets.records import REMEDIATIONS_ENDED
from core.remediation_metrics import STUCK, TOTAL

_SERVICE = service_target()
_SEL = f"{{{c.SERVICE_SELECTOR}}}"
REMEDY, STAGE = label("remedy"), label("stage")
_LIST_OPEN = "`curl -s 'http://127.0.0.1:8080/v1/remediations?open=true'`"
_RMA = f'{REMEDIATIONS_ENDED}{{result="rma"}}'
_ENDED = f'{REMEDIATIONS_ENDED}{{result=~"returned|rma"}}'


def _stuck_case() -> Case:
    """A reset stuck in its remedy stage fires; a drain past its deadline for a few minutes does not."""
    stuck = {**_SERVICE, "remedy": "reset", "stage": "remedy"}
    blip = {**_SERVICE, "remedy": "reboot", "stage": "drain"}
    return Case(
        series=((series(STUCK, stuck), "0x10 1x10 2x20"), (series(STUCK, blip), "0x5 1x4 0x31")),
        quiet_at="15m",
        fire_at="25m",
        value=2,
        labels=({"remedy": "reset", "stage": "remedy"},),
    )


def _rma_case() -> Case:
    """Reboots: 3 of 3 ended in rma (fires); resets: 36 rma of 91 ended, under half (quiet)."""
    ended = (
        ({"remedy": "reboot", "result": "returned"}, "0x60"),
        ({"remedy": "reboot", "result": "rma"}, "0x20 1x10 2x10 3x20"),
        ({"remedy": "reset", "result": "returned"}, "0+1x60"),
        ({"remedy": "reset", "result": "rma"}, "0x19 1+1x41"),
        ({"remedy": "reset", "result": "cancelled"}, "0+2x60"),
    )
    return Case(
        series=tuple((series(TOTAL, {**_SERVICE, **lbls}), values) for lbls, values in ended),
        quiet_at="35m",
        fire_at="55m",
        value=3,
        labels=({"remedy": "reboot"},),
    )


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuRemediationStuck",
        group=GROUP_REMEDIATION,
        expr=f"max by (remedy, stage) ({STUCK}{_SEL}) > 0",
        for_=c.REMEDIATION_STUCK_FOR,
        severity="warning",
        action="watch",
        summary=f"{VALUE} GPU {REMEDY} remediations stuck in stage {STAGE}",
        description=f"{VALUE} remediations by {REMEDY} have been in stage {STAGE} past their deadline for "
        f"{c.REMEDIATION_STUCK_FOR}: their GPUs stay out of service until someone looks.",
        case=_stuck_case(),
        meaning="gpuhealth takes a GPU through drain (wait until the GPU, or for a reboot the node, has no work), "
        "remedy (the node agent resets the GPU, or the node reboots through Slurm or kured) and verify (the "
        "agent runs the verified probes), then returns it to service or escalates it to rma. Each stage has a "
        "deadline; a remediation past it is stuck. Nothing is undone: the GPU stays drained, and the loop goes "
        "on trying, so an unstuck remediation moves on by itself.",
        check=(
            f"Which remediations, on which GPUs and nodes, since when and in what stage: {_LIST_OPEN} (each "
            "with its deadline and the agent's last report, if any); every step is in "
            "`curl -s 'http://127.0.0.1:8080/v1/actions?hostname=<Hostname>'`.",
            "Stage `drain`: the work that keeps the GPU (or node) busy: `squeue -w <Hostname>` or "
            "`kubectl get pods -A --field-selector spec.nodeName=<Hostname>`; a long job holds a remediation "
            "until it ends.",
            "Stage `remedy`, reset: is the node agent running and allowed to reset (`gpuhealth collect "
            "--allow-reset`, its log: `journalctl -u gpuhealth-collect`); a reset is refused while any process "
            "holds the GPU (`nvidia-smi --query-compute-apps=pid,name --format=csv -i <gpu>`).",
            "Stage `remedy`, reboot: Slurm: `scontrol show node <Hostname>` (State REBOOT_REQUESTED or "
            "REBOOT_ISSUED, and a RebootProgram in slurm.conf); Kubernetes: kured's pod on the node and its lock "
            "(`kubectl -n kube-system get ds kured`, the sentinel file the agent wrote).",
            "Stage `verify`: the agent's probes on that GPU (the agent's log; `gpuhealth_probe_passed`).",
        ),
        act=(
            "Let a long job finish, or free the GPU yourself; restart a node agent that is down; turn on "
            "`--allow-reset` where resets are meant to run; fix kured or Slurm's RebootProgram.",
            "To give up on the remedy: repair by hand (reset or reboot, `dcgmi diag -r 3 -i <gpu>`) and return "
            "the node yourself (`scontrol update NodeName=<Hostname> State=RESUME` or `kubectl uncordon "
            "<Hostname>`), or open an RMA (GpuDecisionRma's runbook says what to attach).",
        ),
    ),
    Alert(
        name="GpuRemediationRmaRateHigh",
        group=GROUP_REMEDIATION,
        expr=f"sum by (remedy) ({_RMA}) >= {c.REMEDIATION_RMA_MIN}\nand\n"
        f"sum by (remedy) ({_RMA}) / sum by (remedy) ({_ENDED}) > {fmt(c.REMEDIATION_RMA_SHARE)}",
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"Verification sent {VALUE} GPUs to rma after a {REMEDY} in {c.REMEDIATION_RMA_WINDOW}",
        description=f"{VALUE} remediations by {REMEDY} ended in rma in the last {c.REMEDIATION_RMA_WINDOW}, more "
        f"than {fmt(c.REMEDIATION_RMA_SHARE * 100)} % of those that ended (returned or rma).",
        case=_rma_case(),
        meaning="After a remedy the node agent runs the verified probes on the GPU and the service checks that the "
        "cause is gone; a GPU that fails goes to rma. Most remedied GPUs should pass. Many failing at once points "
        "at a common cause rather than bad GPUs: a driver or firmware version, a probe threshold wrong for a GPU "
        "model, a remedy that does not take (a reboot that never happened, a reset that did not clear the "
        "pending flag), or a batch of bad boards. Each wrong rma is a GPU out of service for weeks.",
        check=(
            "Which GPUs and why: `curl -s 'http://127.0.0.1:8080/v1/decisions?decision=rma'` (the evidence) and "
            "the verify and escalate lines of `curl -s 'http://127.0.0.1:8080/v1/actions?hostname=<Hostname>'` "
            "(each probe's result).",
            "What they share: GPU model, driver version (`DCGM_FI_DRIVER_VERSION`), node group, which probe failed.",
        ),
        act=(
            "A common cause: hold the actuator (`gpuhealth actuate` dry-run, or hold the nodes) before more GPUs "
            "go to rma, fix the cause, then re-verify the escalated GPUs by hand (`dcgmi diag -r 3 -i <gpu>`) "
            "and return those that pass.",
            "Really bad GPUs: open the RMAs (GpuDecisionRma's runbook says what to attach).",
        ),
    ),
)
