"""`gpuhealth train --families` and `gpuhealth evaluate --cross-domain`: randomised training
fleets and the leave-one-family-out table (modelops/crossdomain.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from predictor.thresholds import Thresholds

err = Console(stderr=True)


def _say(prefix: str) -> Any:
    return lambda msg: err.print(f"[dim]{prefix}:[/] {msg}", highlight=False)


def parse_families(text: str) -> tuple[str, ...]:
    """ "all" or a comma-separated list of family names; ValueError naming the unknown ones."""
    from simulator.families import FAMILIES

    if text.strip() == "all":
        return tuple(FAMILIES)
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown families {unknown or [text]}: use 'all' or some of {', '.join(FAMILIES)}")
    return names


def train_families(out: Path, families: str, fleets_per_family: int, nodes: int, days: float, every: str) -> None:
    """Train on randomised fleets of the given families and write the model."""
    from modelops.crossdomain import Plan, train_on_families

    plan = Plan(families=parse_families(families), fleets_per_family=fleets_per_family, train_nodes=nodes,
                train_days=days, every=every)  # fmt: skip
    model = train_on_families(plan, progress=_say("train"))
    model.save(out)
    v = model.meta["validation"]
    err.print(
        f"wrote {out}: trained on {', '.join(plan.families)} ({len(model.meta['training_sets'])} fleets); "
        "validation average precision " + ", ".join(f"{m} {v[m]['average_precision']:.2f}" for m in v),
        highlight=False,
    )


def parse_seeds(text: str | None) -> dict[str, Any]:
    """`--seeds`: a comma-separated list of held-out seeds, as the plan's `test_seeds` ({} for None)."""
    if text is None:
        return {}
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"--seeds: {text!r} is not a comma-separated list of integers") from None
    if not seeds:
        raise ValueError("--seeds: give at least one seed")
    return {"test_seeds": seeds}


def evaluate_cross_domain(
    out: Path,
    model: Path | None,
    families: str,
    fleets_per_family: int,
    seeds: str | None = None,
    scores: Path | None = None,
    thresholds: Thresholds | None = None,
    model_seed: int = 0,
    healthy_remaps: float | None = None,
) -> bool:
    """The leave-one-family-out table (and the given or shipped model on the unseen family); True if all floors hold.
    `scores`: a folder where the models and scored rows are kept (`modelops.scorecache`);
    `model_seed`: the left-out-family models' own seed (the `unseen` column is the shipped model's);
    `healthy_remaps`: the held-out fleets' burst remap share (`Plan.test_burst_remap_share`)."""
    from modelops.crossdomain import (
        Plan,
        all_floors_hold,
        holds_every_floor,
        leave_one_family_out,
        pooled,
        write_cross_domain,
    )
    from modelops.scorecache import ScoreCache
    from predictor.score import load_model
    from predictor.thresholds import Thresholds

    say = _say("cross-domain")
    plan = Plan(
        families=parse_families(families), fleets_per_family=fleets_per_family, model_seed=model_seed,
        test_burst_remap_share=healthy_remaps, **parse_seeds(seeds),
    )  # fmt: skip
    cache = None if scores is None else ScoreCache(scores, say)
    th = thresholds or Thresholds()
    waits = (th.demote_for_s, th.ecc_demote_for_s, th.pcie_demote_for_s, th.light_load_demote_for_s)
    hours = [f"{w / 3600:g} h" for w in waits]
    say(f"policy: demote at {th.demote:.2f} once held {hours[0]} (ECC {hours[1]}, PCIe {hours[2]}, thermal at "
        f"light load {hours[3]}, under {th.light_load_share:.0%} of its baseline's power; PCIe on a link "
        f"replaying out of habit {th.pcie_habit_demote_for_s / 3600:g} h; thermal at once where "
        f"core heat at {th.thermal_agree_heat_z:g} σ and memory-core spread at {th.thermal_agree_z:g} σ agree, "
        f"or the spread alone is {th.thermal_spread_z:g} σ wide); thermal on the core's heat alone at "
        f"{th.thermal_heat_z:g} σ held {th.thermal_heat_for_s / 3600:g} h; on probation after a "
        f"drain or RMA while the risk is at {th.probation_risk:.2f} or above, {th.probation_for_s / 86400:g} days "
        f"at most; {_remap_hold(th)}; GPUHEALTH_DEMOTE_THRESHOLD, _DEMOTE_FOR, _FOR_ECC, _FOR_PCIE, "
        "_FOR_LIGHT_LOAD, _LIGHT_LOAD_SHARE, "
        "_THERMAL_AGREE_Z, _THERMAL_AGREE_HEAT_Z, _THERMAL_SPREAD_Z, _THERMAL_HEAT_Z, _DEMOTE_FOR_HEAT, "
        "_DEMOTE_FOR_PCIE_HABIT, _PCIE_SURPRISE_Z, "
        "_PROBATION_RISK, _PROBATION_FOR, _REMAP_HOLD_RISK, _REMAP_HOLD_FOR set them")  # fmt: skip
    rows = leave_one_family_out(plan, load_model(model), say, th, cache)
    paths = write_cross_domain(rows, plan, out, th)
    ok = all_floors_hold(rows)
    fams = pooled(rows)
    short = [p["family"] for p in fams if not holds_every_floor(p)]
    err.print(
        f"wrote {', '.join(map(str, paths))}\nall floors hold on every held-out fleet: {ok} "
        f"({sum(holds_every_floor(r) for r in rows)} of {len(rows)}); pooled per family, on "
        f"{len(fams) - len(short)} of {len(fams)}" + (f" (not on {', '.join(short)})" if short else ""),
        highlight=False,
    )
    return ok


def _remap_hold(th: Thresholds) -> str:
    """The pending remap's drain as the policy decides it, in words."""
    if th.remap_hold_risk <= 0:
        return "a pending remap drains at once (NVIDIA)"
    held = f" held {th.remap_hold_for_s / 3600:g} h" if th.remap_hold_for_s > 0 else ""
    back = f" (and was {th.remap_hold_clear_s / 3600:g} h before)" if th.remap_hold_clear_s > 0 else ""
    return f"a pending remap's drain waits while the ECC risk is under {th.remap_hold_risk:g}{held}{back}, then stands"
