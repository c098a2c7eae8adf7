"""NVLink links one by one, the fabric and the NVSwitches, from DCGM (the nvml backend's nvml_links, for dcgm).

Per-link error counters are DCGM fields, one id per counter and link (L0..L17); each link's state comes
from dcgmGetNvLinkLinkStatus (pydcgm: DcgmSystem.discovery.GetNvLinkLinkStatus), which also holds the
NVSwitches' port states; the fabric is DCGM's Fabric Manager status fields; the NVSwitches are DCGM's
switch entities (DCGM_FE_SWITCH), read through the built-in group of all of them. A value DCGM does not
have arrives blank (a DCGM_*_BLANK / NOT_SUPPORTED sentinel, or a sample with a non-OK status) and is
absent. Field ids: NVIDIA/DCGM dcgmlib/dcgm_fields.h and testing/python3/dcgm_fields.py (commit 72fa3fe,
2026-07); the older names (..._COUNT_L0, DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS) are that header's aliases of
the same ids. docs/decisions/0087-nvlink-and-nvswitches-from-dcgm.md says why these fields.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.backends.base import BackendError, GpuInfo
from collector.backends.nvml_links import FabricReading, GpuLinks, LinkReading, fabric_state
from collector.nvswitch import SwitchInfo, SwitchReading
from core.nvlink import FABRIC_COMPLETED, NVML_SUCCESS, SWITCH_FIELDS

log = logging.getLogger(__name__)

_IDS_BY_COUNTER: dict[str, tuple[int, ...]] = {
    # NVML_NVLINK_ERROR_* (core.nvlink.COUNTERS) -> the ids of links 0..17. dcgm_fields.h:
    # L0-L5 400-405 (then 410.., 420.., 430..), L6-L11 451-474 in blocks of six, L12-L14 406-408
    # (416.., 426.., 436..), L15-L17 481-493 (490 is unused).
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": (*range(400, 406), *range(451, 457), 406, 407, 408, 481, 482, 483),
    "NVML_NVLINK_ERROR_DL_CRC_DATA": (*range(410, 416), *range(457, 463), 416, 417, 418, 484, 485, 486),
    "NVML_NVLINK_ERROR_DL_REPLAY": (*range(420, 426), *range(463, 469), 426, 427, 428, 487, 488, 489),
    "NVML_NVLINK_ERROR_DL_RECOVERY": (*range(430, 436), *range(469, 475), 436, 437, 438, 491, 492, 493),
}
LINK_FIELDS: dict[int, tuple[str, int]] = {
    fid: (counter, link) for counter, ids in _IDS_BY_COUNTER.items() for link, fid in enumerate(ids)
}
"""DCGM_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_L<n>_TOTAL id -> (NVML counter name, link)."""

FM_STATUS = 170
"""DCGM_FI_DEV_FABRIC_MANAGER_STATUS: a dcgmFabricManagerStatus_t."""
FM_ERROR = 171
"""DCGM_FI_DEV_FABRIC_MANAGER_ERROR (alias ..._ERROR_CODE): the dcgmReturn_t of a failed registration."""
CLUSTER_UUID = 172
"""DCGM_FI_DEV_FABRIC_CLUSTER_UUID, a string."""
CLIQUE_ID = 173
"""DCGM_FI_DEV_FABRIC_CLIQUE_ID."""
FABRIC_FIELDS = (FM_STATUS, FM_ERROR, CLUSTER_UUID, CLIQUE_ID)

# dcgmFabricManagerStatus_t (dcgm_structs.h). DCGM derives it from nvmlDeviceGetGpuFabricInfoV
# (DcgmCacheManager::GetFMStatusFromStruct): NVML's states 0-3 as they are, COMPLETED with a status other
# than NVML_SUCCESS as Failure (4); 5 (Unrecognized) and 6 (NvmlTooOld) say nothing of the fabric.
FM_NOT_STARTED, FM_IN_PROGRESS, FM_SUCCESS, FM_FAILURE = 1, 2, 3, 4
DCGM_ST_GENERIC_ERROR = -3
"""The status of a Failure whose DCGM_FI_DEV_FABRIC_MANAGER_ERROR is blank (dcgm_structs.h)."""

SWITCH_PCI = (866, 867, 868, 869)
"""DCGM_FI_DEV_NVSWITCH_PCIE_DOMAIN, _BUS, _DEVICE, _FUNCTION."""
SWITCH_UUID = 878
"""DCGM_FI_DEV_NVSWITCH_UUID (alias DCGM_FI_DEV_NVSWITCH_DEVICE_UUID), a string."""

# dcgmNvLinkLinkState_t (dcgm_structs.h). DCGM sets Disabled for a link NVML reports down while any GPU
# is in MIG mode (NVML bug 200682374; DcgmTopology.cpp) and for an NVSwitch port not in use, and its own
# health watch skips Disabled links (DcgmHealthWatch.cpp): only Up and Down are links here.
LINK_DOWN, LINK_UP = 2, 3


@dataclass(frozen=True)
class LinkStates:
    """dcgmNvLinkStatus_t: link -> up for each GPU (gpuId) and each NVSwitch (its entity id)."""

    gpus: dict[int, dict[int, bool]]
    switches: dict[int, dict[int, bool]]


def dcgm_number(value: object, dcgmvalue: Any) -> float | None:
    """A DCGM value as a float; None for DCGM's blank, not-found, not-supported sentinels."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        # Integers arrive as int64 (dcgm_field_helpers reads value.i64), so only the
        # int64 sentinels apply: 0x7ffffff0 (the int32 blank) is a real energy count.
        return None if dcgmvalue.DCGM_INT64_IS_BLANK(value) else float(value)
    if isinstance(value, float):
        if math.isnan(value) or dcgmvalue.DCGM_FP64_IS_BLANK(value):
            return None
        return value
    return None  # strings and blobs are not numbers


def _states(raw: Any) -> dict[int, bool]:
    return {link: int(s) == LINK_UP for link, s in enumerate(raw) if int(s) in (LINK_UP, LINK_DOWN)}


def link_states(status: Any) -> LinkStates:
    """The up/down links of a c_dcgmNvLinkStatus_v4/v5 (v4 holds 18 links a GPU, v5 36)."""
    gpus = {int(g.entityId): _states(g.linkState) for g in list(status.gpus)[: int(status.numGpus)]}
    sws = {int(s.entityId): _states(s.linkState) for s in list(status.nvSwitches)[: int(status.numNvSwitches)]}
    return LinkStates(gpus, sws)


def raw_value(sample: Any, dcgmvalue: Any) -> float | str | None:
    """A sample's number or string; None when DCGM left it blank (status not OK, or a blank sentinel)."""
    if getattr(sample, "isBlank", False):
        return None
    value = getattr(sample, "value", None)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        # dcgmvalue.DCGM_STR_IS_BLANK: "<<<NULL>>>", "<<<NOT_FOUND>>>", "<<<NOT_SUPPORTED>>>", "<<<NOT_PERM>>>"
        return None if value.startswith("<<<") and ">>>" in value else value
    return dcgm_number(value, dcgmvalue)


def fabric_reading(values: Mapping[int, float | str]) -> FabricReading | None:
    """The GPU's fabric registration from DCGM's fields; None without a fabric (or without the fields)."""
    fm = values.get(FM_STATUS)
    if not isinstance(fm, float) or int(fm) not in (FM_NOT_STARTED, FM_IN_PROGRESS, FM_SUCCESS, FM_FAILURE):
        return None
    state, status = int(fm), NVML_SUCCESS
    if state == FM_FAILURE:
        err = values.get(FM_ERROR)
        state = FABRIC_COMPLETED
        status = int(err) if isinstance(err, float) and err else DCGM_ST_GENERIC_ERROR
    clique = values.get(CLIQUE_ID)
    return FabricReading(state, status, int(clique) if isinstance(clique, float) else 0, _cluster(values))


def _cluster(values: Mapping[int, float | str]) -> str:
    text = values.get(CLUSTER_UUID)
    if not isinstance(text, str):
        return ""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return text.strip()


def link_readings(states: Mapping[int, bool], values: Mapping[int, float | str]) -> list[LinkReading]:
    """Each link DCGM knows the state of, with the counters DCGM has for it."""
    counters: dict[int, dict[str, int]] = {}
    for fid, value in values.items():
        if fid in LINK_FIELDS and isinstance(value, float):
            name, link = LINK_FIELDS[fid]
            counters.setdefault(link, {})[name] = int(value)
    return [LinkReading(link, up, counters.get(link, {})) for link, up in sorted(states.items())]


def pci_bus_id(values: Mapping[int, float | str]) -> str:
    """The switch's PCI id as NVML spells one (00000000:05:00.0); "" when DCGM lacks a part."""
    parts = [int(v) for fid in SWITCH_PCI if isinstance(v := values.get(fid), float)]
    if len(parts) != len(SWITCH_PCI):
        return ""
    domain, bus, device, function = parts
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


Watch = Callable[[str, list[int], Any], Any]
"""(label, field ids, DcgmGroup) -> the watched DcgmFieldGroup; DCGMError when DCGM refuses."""


class DcgmLinks:
    """The per-link fields, link states, fabric and NVSwitches of one DCGM connection.

    `watch` is DcgmBackend's (it drops ids this DCGM does not know); `gpu_group` the GPUs' DcgmGroup.
    A watch DCGM refuses costs only its own series (logged once at start).
    """

    def __init__(self, m: Any, handle: Any, system: Any, gpu_group: Any, gpus: Mapping[int, GpuInfo], watch: Watch):
        self._m = m
        self._system = system
        self._gpus = gpus
        self._gpu_group = gpu_group
        self._error: type[BaseException] = m.dcgm_structs.DCGMError
        self._fields = self._try_watch(watch, "links", [*LINK_FIELDS, *FABRIC_FIELDS], gpu_group)
        self._switch_group: Any = None
        self._switch_fields: Any = None
        self._switch_ids = self._find_switches()
        if self._switch_ids:
            structs = m.dcgm_structs
            self._switch_group = m.pydcgm.DcgmGroup(handle, groupId=structs.DCGM_GROUP_ALL_NVSWITCHES)
            ids = [*SWITCH_FIELDS.values(), *SWITCH_PCI, SWITCH_UUID]
            self._switch_fields = self._try_watch(watch, "switches", ids, self._switch_group)

    def _try_watch(self, watch: Watch, label: str, ids: list[int], group: Any) -> Any:
        try:
            return watch(label, ids, group)
        except self._error as err:
            log.warning("DCGM refused to watch its %s fields (%s): those series will be absent", label, err)
            return None

    def _find_switches(self) -> list[int]:
        fe_switch = getattr(self._m.dcgm_fields, "DCGM_FE_SWITCH", None)
        if fe_switch is None:
            return []
        try:
            return [int(i) for i in self._system.discovery.GetEntityGroupEntities(fe_switch, True)]
        except self._error as err:  # DCGM without NVSwitch support (no NSCQ): no switches
            log.debug("DCGM lists no NVSwitches: %s", err)
            return []

    # --- reads ---------------------------------------------------------------------------------

    def _latest(self, group: Any, fields: Any, entity_group: int) -> dict[int, dict[int, float | str]]:
        """entity id -> field id -> its latest non-blank value."""
        if fields is None:
            return {}
        dcgmvalue = self._m.dcgmvalue
        collection = group.samples.GetLatest_v2(fields).values.get(entity_group, {})
        out: dict[int, dict[int, float | str]] = {}
        for eid, by_field in collection.items():
            latest = ((fid, raw_value(series[-1], dcgmvalue)) for fid, series in by_field.items() if len(series))
            out[int(eid)] = {fid: v for fid, v in latest if v is not None}
        return out

    def _link_states(self) -> LinkStates:
        get = getattr(self._system.discovery, "GetNvLinkLinkStatus", None)
        if get is None:  # bindings before DCGM 1.5
            return LinkStates({}, {})
        try:
            return link_states(get())
        except self._error as err:
            if getattr(err, "value", None) == self._m.dcgm_structs.DCGM_ST_NOT_SUPPORTED:
                return LinkStates({}, {})
            raise

    def read(self) -> list[GpuLinks]:
        """Every GPU's links and fabric (collector.nvlink's source); BackendError when DCGM fails."""
        try:
            states = self._link_states()
            values = self._latest(self._gpu_group, self._fields, self._m.dcgm_fields.DCGM_FE_GPU)
        except self._error as err:
            raise BackendError(f"reading NVLink links from DCGM: {err}") from err
        out = []
        for gid, info in self._gpus.items():
            mine = values.get(gid, {})
            out.append(GpuLinks(info, link_readings(states.gpus.get(gid, {}), mine), fabric_reading(mine)))
        return out

    def catalogue_values(self) -> dict[int, dict[str, float]]:
        """gpuId -> `nvlink_links_down` and `gpu_fabric_state` where the GPU has links or a fabric."""
        out: dict[int, dict[str, float]] = {}
        for g in self.read():
            vals: dict[str, float] = {}
            if g.links:
                vals["nvlink_links_down"] = float(sum(not r.up for r in g.links))
            if g.fabric is not None:
                vals["gpu_fabric_state"] = float(fabric_state(g.fabric))
            out[g.info.index] = vals
        return out

    def switch_readings(self) -> list[SwitchReading]:
        """Each NVSwitch DCGM lists, with its watched values and port states; BackendError when DCGM fails."""
        if not self._switch_ids:
            return []
        try:
            fe_switch = self._m.dcgm_fields.DCGM_FE_SWITCH
            values = self._latest(self._switch_group, self._switch_fields, fe_switch)
            states = self._link_states()
        except self._error as err:
            raise BackendError(f"reading NVSwitches from DCGM: {err}") from err
        names = {fid: name for name, fid in SWITCH_FIELDS.items()}
        out = []
        for sid in self._switch_ids:
            mine = values.get(sid, {})
            uuid_ = mine.get(SWITCH_UUID)
            info = SwitchInfo(str(sid), pci_bus_id(mine), uuid_ if isinstance(uuid_, str) else "")
            nums = {names[f]: v for f, v in mine.items() if f in names and isinstance(v, float)}
            out.append(SwitchReading(info, nums, states.switches.get(sid, {})))
        return out

    def switches(self) -> list[SwitchInfo]:
        """The NVSwitches DCGM lists, with their PCI ids (collector.nvswitch.SwitchLister)."""
        return [r.info for r in self.switch_readings()]
