"""A link's habit belongs to its slot: the GPUs that held a GPU's slot before it.

PCIe replays come as much from the riser, cable and slot as from the GPU, and a replaced GPU
goes into the same slot with a new UUID and no history. So the habit a GPU's replays are judged
against (`errors.pcie_replays`) takes in the hours of the GPUs it replaced. A slot is a host and a
PCI bus id where the frame carries the GPUs' (`history.BUS_IDS_ATTR`: the store's records, which
the collector fills), else a host and a GPU index, which every history has: NVML numbers a node's
GPUs in bus order in practice, though it does not promise to across reboots (decision 0089). A
GPU whose rows overlap the new GPU's (a neighbour renumbered while a GPU was missing) is not its
predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.history import BUS_IDS_ATTR
from predictor.features.frame import KEY_SHIFT, OrderedFrame
from predictor.features.windows import CounterIncreases, Queries


@dataclass(frozen=True)
class Predecessors:
    """Pairs (query, GPU): `query` positions into the queries, `gpu` positions into `f.gpu_codes` of the
    GPUs that held the query GPU's slot and stopped reporting before it first did."""

    query: np.ndarray
    gpu: np.ndarray


NONE = Predecessors(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def _bus_codes(f: OrderedFrame) -> np.ndarray | None:
    """Per GPU (positions into `f.gpu_codes`): a code of its PCI bus id (the frame's `history.BUS_IDS_ATTR`),
    -1 where unknown; None when the frame knows none."""
    buses = f.frame.attrs.get(BUS_IDS_ATTR) or {}
    if not buses:
        return None
    bus = pd.Series(f.uuids[f.gpu_codes]).map(buses)
    codes, _ = pd.factorize(bus.str.upper())  # NaN (unknown): -1
    return codes.astype(np.int64)


def _slot_codes(f: OrderedFrame, rows: np.ndarray, gpu: np.ndarray, bus: np.ndarray | None) -> np.ndarray:
    """A code per slot at rows in (GPU, time) order of GPUs `gpu` (positions into `f.gpu_codes`): (host, PCI
    bus id) where `bus` (`_bus_codes`) knows the GPU's, else (host, GPU index); -1 where neither is known."""
    host = f.label_codes("hostname")[f.frame_rows(rows)].astype(np.int64)
    index = f.frame["gpu_index"].to_numpy()[f.frame_rows(rows)].astype(np.int64)
    slot = np.where(index >= 0, index & 0x7FFFFFFF, -1)
    if bus is not None:
        b = bus[gpu]
        slot = np.where(b >= 0, (1 << 31) | b, slot)  # a bus id and an index never match
    return np.where(slot >= 0, (host << 32) | slot, -1)


def predecessors(f: OrderedFrame, q: Queries) -> Predecessors:
    """The GPUs that held each query GPU's slot before it (none, as a rule: then nothing is read
    beyond one code per GPU)."""
    every = np.arange(len(f.gpu_codes))
    bus = _bus_codes(f)
    gpu_slot = _slot_codes(f, f.gpu_end - 1, every, bus)  # a GPU's slot: where it last reported
    known = gpu_slot[gpu_slot >= 0]
    if len(np.unique(known)) == len(known):
        return NONE  # no slot has held two GPUs
    q_slot = _slot_codes(f, q.end_row, q.gpu_pos, bus)  # the query GPU's slot at its cutoff
    shared = np.isin(q_slot, known[pd.Series(known).duplicated(keep=False).to_numpy()])
    if not shared.any():
        return NONE
    qi = np.flatnonzero(shared)
    left = pd.DataFrame({"slot": q_slot[qi], "query": qi, "first": f.first_t[q.gpu_pos[qi]]})
    right = pd.DataFrame({"slot": gpu_slot, "gpu": every, "last": f.last_t})
    pairs = left.merge(right, on="slot")
    pairs = pairs[(pairs["last"] < pairs["first"]).to_numpy()]
    return Predecessors(pairs["query"].to_numpy(np.int64), pairs["gpu"].to_numpy(np.int64))


def rows_in(
    f: OrderedFrame, gpu: np.ndarray, after_s: np.ndarray, until_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi): positions of each GPU's rows in (after, until] (seconds since t0; empty where until <= after)."""
    code = f.gpu_codes[gpu] << KEY_SHIFT
    start = f.gpu_start[gpu]

    def bound(t: np.ndarray) -> np.ndarray:
        return np.where(t < 0, start, np.searchsorted(f.key, code | np.maximum(t, 0), side="right"))

    lo = bound(after_s)
    return lo, np.maximum(bound(until_s), lo)


def rising_counts(
    f: OrderedFrame, rep: CounterIncreases, name: str, lo: np.ndarray, hi: np.ndarray, left_out: np.ndarray
) -> np.ndarray:
    """Per run [lo, hi) of rows: the rows where counter `name` rose (`rep`'s increments), less those in
    `left_out` (sorted positions: the settling rows that rose)."""
    if rep.inc is not None:
        rising = np.flatnonzero(rep.inc > 0)
        n = np.searchsorted(rising, hi) - np.searchsorted(rising, lo)
    else:
        # A single cutoff's counter read only its windows' rows, and the column has no NaN
        # (`FeatureContext.counter`): each row's increase is that row less the one before.
        length = hi - lo
        rows = np.repeat(lo - np.cumsum(length) + length, length) + np.arange(int(length.sum()))
        x = f.at_rows(name, rows)
        prev = f.at_rows(name, np.maximum(rows - 1, 0))
        up = (np.where(x < prev, x, x - prev) > 0) & ~f.new_gpu[rows]
        n = np.bincount(np.repeat(np.arange(len(lo)), length), weights=up, minlength=len(lo)).astype(np.int64)
    return (n - (np.searchsorted(left_out, hi) - np.searchsorted(left_out, lo))).astype(float)
