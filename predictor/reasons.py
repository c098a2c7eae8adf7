"""The sentences a decision carries, each written from the thresholds and the readings that made it:
why a model demote is still a watch (`pending_reason`), why a thermal demote did not wait
(`agree_reason`), why a demote stands on heat alone, on probation or held (`heat_reason`,
`probation_reason`, `hold_reason`), and what the ECC risk makes of a pending remap
(`remap_context`, `remap_wear_reason`, `remap_stands_reason`). `policy.decide` puts them together; what decides is in
`thresholds` and `policy`, so a sentence reads the same levels the decision used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.conditions import cooling_witnesses, habitual_link, heat_counts, thermal_conditions
from predictor.thresholds import Thresholds


def pending_reason(
    since: pd.Timestamp,
    thresholds: Thresholds,
    mode: str,
    load_share: float | None = None,
    surprise: float | None = None,
    spread_z: float | None = None,
    vs_node_z: float | None = None,
) -> str:
    """Why a demote by the model is a watch for now: since when its risk is high, and until when it
    must stay so (the wait of its riskiest head `mode`; with `load_share`, a thermal one at
    light load, which also stands once the load returns, or waits only the thermal wait where its
    memory-core spread `spread_z` stands out (`light_wait`); with `vs_node_z` and `spread_z`, a
    thermal one neither corroborates (`uncorroborated`); None or NaN: not known; with `surprise`, a
    PCIe one on a link replaying out of habit)."""
    share, spread, vs_node = ([np.nan if x is None else x] for x in (load_share, spread_z, vs_node_z))
    light, long, alone = (bool(flag[0]) for flag in thermal_conditions(share, spread, vs_node, thresholds))
    habit = surprise is not None and bool(habitual_link([surprise], thresholds)[0])
    wait, base = thresholds.wait_for([mode], [long], [habit], [alone])[0], thresholds.wait_for([mode])[0]
    due = since + pd.Timedelta(wait)
    text = (
        f"demote pending: risk at or above {thresholds.demote:.2f} since {since:%Y-%m-%d %H:%M} UTC; "
        f"it is demoted if that holds until {due:%Y-%m-%d %H:%M} UTC"
    )
    if wait > base and long:  # the light-load wait is the one that holds it
        text += (
            f", or sooner once its load returns: light load (6 h power {load_share:.0%} of its baseline's), "
            "where heat is judged by extrapolation"
        )
    elif light and not long and wait < thresholds.wait_for([mode], [True])[0]:  # the spread shortened it
        text += (
            f": at light load (6 h power {load_share:.0%} of its baseline's) but its memory-core spread stands "
            f"{spread_z:+.1f} σ out of its own 30 days (at {thresholds.light_load_spread_z:g} σ or more), so "
            f"not the {thresholds.light_load_demote_for_s / 3600:g} h light-load wait"
        )
    elif wait > base and alone:  # no reading corroborates it
        text += (
            f": no reading of its own cooling corroborates it (its heat over its node's {vs_node_z:+.1f} σ of its "
            f"own spread of that, its memory-core spread {spread_z:+.1f} σ, both under "
            f"{thresholds.thermal_corroborate_z:g} σ): its heat is what its node or its power explain"
        )
    elif wait > base:  # the habitual link's
        seen = "not known" if surprise is None or np.isnan(surprise) else f"{surprise:+.1f} σ"
        text += (
            f": its link replays out of habit (its hours with new replays over 6 h stand {seen} out of its own "
            f"month, under {thresholds.pcie_surprise_z:g} σ)"
        )
    return text


def agree_reason(heat_z: float, spread_z: float, vs_node_z: float, thresholds: Thresholds) -> str:
    """Why a thermal demote stands before its wait is over: the two readings that agree, the
    memory-core spread alone, or the heat over its node's (`witnesses_agree`), the first that holds."""
    wait = f"thermal demote without its {thresholds.demote_for_s / 3600:g} h wait"
    both, wide, _ = cooling_witnesses(heat_z, spread_z, vs_node_z, thresholds)
    if both:
        return (
            f"{wait}: two readings of its own cooling agree: the core runs {heat_z:+.1f} σ hot against its own past "
            f"and its node (at {thresholds.thermal_agree_heat_z:g} σ or more), and the memory-core spread is "
            f"{spread_z:+.1f} σ wide against its own 30 days (at {thresholds.thermal_agree_z:g} σ or more)"
        )
    heat = "not known" if np.isnan(heat_z) else f"{heat_z:+.1f} σ"
    if wide:
        return (
            f"{wait}: the memory-core spread is {spread_z:+.1f} σ wide against its own 30 days (at "
            f"{thresholds.thermal_spread_z:g} σ or more; the core's heat against its own past and its node: {heat}): "
            "its own cooling, not the room's"
        )
    return (
        f"{wait}: the core runs hotter than its node's GPUs by {vs_node_z:+.1f} σ of its own spread of that "
        f"difference (at {thresholds.thermal_agree_vs_node_z:g} σ or more; against its own past and its node: "
        f"{heat}): its own cooling, not the room's"
    )


def heat_reason(heat_z: float, vs_node_z: float, since: pd.Timestamp, thresholds: Thresholds) -> str:
    """Why a GPU is demoted on its heat alone (`heat_held`): how hot, by which yardstick, since when,
    and what to check. `since` is as far back as the rounds read go (the hold and an hour): every
    round since counted."""
    th = thresholds
    if heat_counts(heat_z, np.nan, th):
        how = f"the core runs {heat_z:+.1f} σ hot against its own past and its node, at {th.thermal_heat_z:g} σ or more"
    else:
        over = "not known" if np.isnan(vs_node_z) else f"{vs_node_z:+.1f} σ"
        how = (
            f"the core runs hotter than its node's GPUs by {over} of its own spread of that difference "
            f"(at {th.thermal_heat_vs_node_z:g} σ or more; the room's swings cancel against its node), and "
            f"{heat_z:+.1f} σ hot against its own past and its node (at {th.thermal_heat_vs_node_excess_z:g} σ or more)"
        )
    return (
        f"thermal demote on heat alone: {how} in every round since {since:%Y-%m-%d %H:%M} UTC "
        f"(the hold: {th.thermal_heat_for_s / 3600:g} h), beyond what its power explains: check its "
        "cooling (heat sink, fans, thermal paste)"
    )


def probation_reason(began: pd.Timestamp, risk: float, thresholds: Thresholds) -> str:
    """Why a GPU is demoted on probation: when the drain or RMA let it go, its risk, and until when."""
    until = began + pd.Timedelta(seconds=thresholds.probation_for_s)
    return (
        f"probation: a drain or RMA let it go on {began:%Y-%m-%d %H:%M} UTC, and its risk {risk:.2f} "
        f"is still at or above {thresholds.probation_risk:.2f}; interruptible work only until it falls "
        f"under that, or until {until:%Y-%m-%d %H:%M} UTC at the latest"
    )


def hold_reason(since: pd.Timestamp, risk: float, thresholds: Thresholds) -> str:
    """Why a GPU whose demote stands is still demoted: since when, its risk, and what ends it."""
    return (
        f"demote held: demoted since {since:%Y-%m-%d %H:%M} UTC, and its risk {risk:.2f} is still at or "
        f"above {thresholds.release_level:.2f}; interruptible work only until it falls under that"
    )


def remap_context(risk_ecc: float, thresholds: Thresholds) -> str:
    """What the ECC head's risk says of a GPU whose pending remap waits for a reset at idle."""
    level, hold_h = thresholds.remap_hold_risk, thresholds.remap_hold_for_s / 3600
    drains = "" if level <= 0 else (
        f"; it is drained if its ECC risk reaches {level:g}" if hold_h == 0
        else f"; it is drained if its ECC risk holds {level:g} for {hold_h:g} h"
    )  # fmt: skip
    if risk_ecc >= thresholds.watch:
        return f"its ECC risk {risk_ecc:.2f} (at {thresholds.watch:g} or above) says its memory may be wearing{drains}"
    return (
        f"its ECC risk {risk_ecc:.2f} (under {thresholds.watch:g}) shows no wearing memory: a weak row on a "
        f"healthy GPU is remapped too, and NVIDIA lets work go on until the reset{drains}"
    )


def remap_wear_reason(risk_ecc: float, thresholds: Thresholds) -> str:
    """Why a pending remap drains: the ECC head reads its memory as wearing (`remap_hold_risk`)."""
    level, hold_h = thresholds.remap_hold_risk, thresholds.remap_hold_for_s / 3600
    if level <= 0:
        return "drained at once, whatever its ECC risk: GPUHEALTH_REMAP_HOLD_RISK is 0 (the operator's choice)"
    held = f"reached {level:g}" if hold_h == 0 else f"held {level:g} for {hold_h:g} h"
    return (
        f"its ECC risk {risk_ecc:.2f} {held}: its memory is wearing, so the reset does not wait for idle: "
        "drain it, reset it now and follow the reset with a field diagnostic"
    )


def remap_stands_reason(risk_ecc: float, thresholds: Thresholds) -> str:
    """Why a pending remap's drain stands though this round's ECC risk is under `remap_hold_risk`: the GPU
    was drained already, or its ECC risk held the level within `remap_hold_clear_s` (`policy.decide`'s
    `drained`)."""
    back = thresholds.remap_hold_clear_s / 3600
    within = f" within the last {back:g} h" if back > 0 else ""
    said = "unknown" if risk_ecc != risk_ecc else f"{risk_ecc:.2f}"  # NaN: not scored this round
    return (
        f"the drain stands though its ECC risk {said} is under {thresholds.remap_hold_risk:g}: it was "
        f"drained already, or its ECC risk reached {thresholds.remap_hold_risk:g}{within}, so its memory may be "
        "wearing: keep it out until the reset takes the remap, and follow the reset with a field diagnostic"
    )
