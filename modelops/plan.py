"""The plan of the cross-domain evaluation: the sizes and seeds of its training and held-out fleets.

Its own module so that the evaluation (`modelops.crossdomain`) and its kept work
(`modelops.scorecache`, which names a plan's fleets in its keys) both read it, and neither the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.families import FAMILIES


@dataclass(frozen=True)
class Plan:
    """Sizes and seeds of the training fleets and the held-out ones (defaults: `make model`, docs/model.md)."""

    families: tuple[str, ...] = tuple(FAMILIES)
    fleets_per_family: int = 2
    train_nodes: int = 32
    train_days: float = 90.0
    train_acceleration: float = 8.0
    """Failure rate x the field's in training fleets: rare modes (thermal, PCIe) need examples."""
    train_seed: int = 100
    """Training fleets use seeds train_seed, train_seed + 1, ... in every family."""
    test_nodes: int = 64
    test_days: float = 90.0
    test_acceleration: float = 8.0
    test_seeds: tuple[int, ...] = (*range(900, 907), 913, 914, *range(917, 928))
    """Held-out fleets use these seeds, never a training seed: each family is evaluated on a fleet
    of each. Seeds 900-906's fleets were looked at while the model was built (each a fresh test
    once, then a development set: 904's false alerts showed the judging of GPUs already failed
    wrong, 905's misses the GPUs without a memory sensor); 913 and 914's only with the shipped
    model's code, for the decision to ship it (docs/model.md); 917's once with it, as the
    baseline of a change not shipped; 918-920's once with single-seed models, for the decision
    to make each head the mean of two seeds' (a rule set beforehand, replayed on their kept
    scores); 921-923's once with version 7's models, for the decision on the light-load thermal
    wait (`thresholds.Thresholds.light_load_demote_for_s`; both policies on the same scores);
    924-925's once with version 7's and once with version 8's models, for the decision to ship
    version 8 (the memory-core spread over 6 h); 926-927's once with version 8's models, judged
    with and without the probation after a drain (`thresholds.Thresholds.probation_risk`), for the
    decision to ship it. 928-929's once with version 8's models, judged with and without the node hold's
    memory-core spread (`predictor.node.NodeHeat.stands_out_z`), for the decision to ship it (not
    in the docs' tables); 930-931's the same way for the hold of a standing demote
    (`thresholds.Thresholds.release`), and 936-937's for the thermal demote that stands at once where two
    readings agree (`thresholds.Thresholds.thermal_agree_z`), 938-939's for the 6 h wait of a PCIe demote
    on a link replaying out of habit (`thresholds.Thresholds.pcie_surprise_z`), 940-941's for the thermal
    demote that stands at once where the memory-core spread alone is 4 σ wide
    (`thresholds.Thresholds.thermal_spread_z`), 942-943's for the core's heat at 1 σ in the agreement
    (`thresholds.Thresholds.thermal_agree_heat_z`), 944-945's for the thermal demote on the core's heat
    alone held 6 h (`thresholds.Thresholds.thermal_heat_z`). 907-912, 915, 916 and 932-935 were spent on
    versions and policies not shipped (934-935 on a 5 h PCIe wait with the thermal demote after four hours
    at watch, docs/model.md). 946-953 went to the rules docs/model.md names for them, 954-955 to the
    twelfth (the pending remap's hold as the default, not shipped), 956-957 to the thirteenth (the same
    with a look back of 24 h, not shipped): the next clean seed is 958."""
    every: str = "6h"
    """Cutoff spacing of the training rows."""
    model_seed: int = 0
    """The models' own seed (the calibration folds, the sample the trees bin their features on;
    `predictor.model.train_sets`: the members of seed s are seeded s * MEMBERS onward, so two
    model seeds share no member). The same fleets trained with another seed show how far a
    retrained model's numbers move by chance: as far as some changes once judged on one training
    of each side (docs/model.md)."""
    score_every: str = "1h"
    """How often the held-out fleets are scored."""
    test_burst_remap_share: float | None = None
    """A stress of the held-out fleets only: their `Domain.burst_remap_share` (the share of a healthy
    GPU's SBE bursts that leave a weak row remapped, pending until the node's reboot) set to this
    instead of their family's (0 in every family today). The development worlds remap no healthy
    GPU's row, while about 59 % of H100 row remaps succeed (REFERENCE.md): this asks what NVIDIA's
    pending-remap drain, and the hold of it (`thresholds.Thresholds.remap_hold_risk`), make of a
    world that has them. The training fleets are untouched. None: the family's."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown families {unknown}: choose from {', '.join(FAMILIES)}")
        if self.fleets_per_family < 1 or self.train_nodes < 1 or self.test_nodes < 1:
            raise ValueError("fleets per family and nodes must be at least 1")
        if self.test_burst_remap_share is not None and not (0.0 <= self.test_burst_remap_share <= 1.0):
            raise ValueError(f"the held-out fleets' burst remap share must be between 0 and 1; got "
                             f"{self.test_burst_remap_share}")  # fmt: skip
        if not self.test_seeds or any(
            self.train_seed <= t < self.train_seed + self.fleets_per_family for t in self.test_seeds
        ):
            raise ValueError("the held-out fleets' seeds must be given and none of them a training seed")
