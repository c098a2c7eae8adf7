"""Pull a fleet's GPU history out of Prometheus into a history frame.

Each catalogue field is range-queried under its metric name (the DCGM name where one
exists, so series scraped from dcgm-exporter and from `gpuhealth collect` both work),
in time chunks below Prometheus's 11,000-points-per-series limit, and the answers are
joined per GPU on (UUID, timestamp). A row's values are what Prometheus evaluates at
each step (the latest sample within its lookback window), not averages over the step.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pandas as pd

from core import catalog, history, identity
from core.history import HistoryError, validate
from core.infiniband import rail_name
from core.labels import HOST_LABELS as HOST_LABEL_NAMES

log = logging.getLogger(__name__)

MAX_POINTS = 11_000
"""Prometheus refuses a range query with more than 11,000 points per series."""
GROUP_LABELS = ("UUID", "gpu", "device", "modelName", *HOST_LABEL_NAMES, "instance")
"""Labels kept per series. Everything else (pod, namespace, container, job, MIG instance)
is aggregated away with max(), so a GPU whose pod changed is still one series."""
TIMEOUT_S = 120.0
"""A 10,000-step query over a large fleet takes seconds; two minutes allows a busy server."""
HOST_LABELS = (*HOST_LABEL_NAMES, "instance")
"""Where a series' host comes from, first found wins (`_collect`): dcgm-exporter's label before
2026, its label since, and Prometheus's target (host:port, the port dropped)."""
MAX_GET_CHARS = 4_000
"""Longer query parameters (a replica's hosts in a matcher) go in a POST body: proxies and
servers limit the URL, Prometheus takes the same parameters form-encoded."""
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")
_PORT = re.compile(r":\d+$")
_DIGITS = re.compile(r"(\d+)$")
_IDENTITY_LABELS = ("UUID", "gpu", "device", "modelName", *HOST_LABELS)
"""What names a series in the log: the labels its GPU's identity is read from."""


class NoSeries(HistoryError):
    """Prometheus answered, but with no GPU series in the time range."""


@dataclass(frozen=True)
class SkippedSeries:
    """A series left out of an import, and why: its GPU's identity cannot be stored, or a value of it
    cannot be held in a history (an infinity): every other series is imported."""

    reason: str
    """One of `identity.REASONS`."""
    why: str
    labels: tuple[tuple[str, str], ...]
    """Its identity labels as given (`_IDENTITY_LABELS` it has); for a bad value, its metric and its GPU."""

    def name(self) -> str:
        """The series as a log line names it, every value escaped and cut short."""
        return "{" + ", ".join(f"{k}={identity.shown(v)}" for k, v in self.labels) + "}"


@dataclass
class _Series:
    """What one column's answers hold, flattened: series id, time (ms) and value per point."""

    sid: list[np.ndarray] = field(default_factory=list)
    t_ms: list[np.ndarray] = field(default_factory=list)
    value: list[np.ndarray] = field(default_factory=list)


def _unix(t: datetime) -> float:
    """Unix seconds of a datetime; a naive one is taken as UTC."""
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _iso(t: datetime) -> str:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).isoformat().replace("+00:00", "Z")


class _Api:
    """Prometheus's HTTP API; every failure becomes a one-line HistoryError naming the URL."""

    def __init__(self, url: str, client: httpx.Client) -> None:
        self.url = url.rstrip("/")
        self.client = client

    def get(self, path: str, params: dict[str, str]) -> Any:
        where = f"Prometheus at {self.url}"
        try:
            if sum(len(v) for v in params.values()) > MAX_GET_CHARS:
                resp = self.client.post(self.url + path, data=params)
            else:
                resp = self.client.get(self.url + path, params=params)
        except httpx.ConnectError as err:
            raise HistoryError(f"{where}: cannot connect ({_one_line(err) or 'connection refused'})") from err
        except httpx.TimeoutException as err:
            raise HistoryError(f"{where}: no answer within {TIMEOUT_S:g}s ({path})") from err
        except httpx.HTTPError as err:
            raise HistoryError(f"{where}: {type(err).__name__}: {_one_line(err)}") from err
        try:
            answer = json.loads(resp.content)  # bytes: no decoding to text first (answers run to megabytes)
        except (json.JSONDecodeError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict) or "status" not in answer:
            kind = resp.headers.get("content-type", "no content type")
            raise HistoryError(f"{where}: not a Prometheus API answer to {path} (HTTP {resp.status_code}, {kind})")
        if answer["status"] != "success":
            raise HistoryError(
                f"{where}: {path} failed (HTTP {resp.status_code}): "
                f"{answer.get('errorType', 'error')}: {_one_line(answer.get('error', 'no reason given'))}"
            )
        if resp.status_code != 200:
            raise HistoryError(f"{where}: {path} answered HTTP {resp.status_code}")
        return answer.get("data")


@contextmanager
def _api(url: str, client: httpx.Client | None) -> Iterator[_Api]:
    """The API at `url` over `client`, or over a client of its own, closed when done."""
    if client is not None:
        yield _Api(url, client)
        return
    with httpx.Client(timeout=TIMEOUT_S) as own:
        yield _Api(url, own)


def _host_name(label: str, value: str) -> str:
    """A host's name from one of HOST_LABELS: an `instance` loses its port."""
    return _PORT.sub("", value) if label == "instance" else value


def _host_of(m: Mapping[str, str]) -> str:
    """The host of a series: the first of HOST_LABELS it has ("" when none)."""
    return next((_host_name(h, str(m[h])) for h in HOST_LABELS if m.get(h)), "")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _fields(
    api: _Api, columns: Sequence[str] | None, start_s: float, end_s: float
) -> tuple[list[str], list[catalog.Field]]:
    """(columns of the result, fields to query): only metrics the server has are queried."""
    if columns is not None:
        try:
            wanted = list(catalog.select(list(columns)))
        except catalog.CatalogError as err:
            raise HistoryError(str(err)) from err
    names = api.get("/api/v1/label/__name__/values", {"start": f"{start_s:.3f}", "end": f"{end_s:.3f}"})
    on_server = set(names or ())
    if columns is None:
        # The fixed history columns always (NaN where absent), other fields where present.
        wanted = [f for f in catalog.FIELDS if f.name in catalog.HISTORY_COLUMNS or f.metric_name in on_server]
    return [f.name for f in wanted], [f for f in wanted if f.metric_name in on_server]


def _check_range(start: datetime, end: datetime, step_s: float, chunk_points: int) -> None:
    """HistoryError unless the step is at least 1 ms, start <= end and the chunk is within Prometheus's limit."""
    if round(step_s * 1000) < 1:
        raise HistoryError(f"step must be at least 1ms, got {step_s!r}s")
    if round(_unix(end) * 1000) < round(_unix(start) * 1000):
        raise HistoryError(f"start {_iso(start)} is after end {_iso(end)}")
    if not 1 <= chunk_points <= MAX_POINTS:
        raise HistoryError(f"chunk_points must be 1..{MAX_POINTS} (Prometheus's limit), got {chunk_points}")


def import_history(
    url: str,
    start: datetime,
    end: datetime,
    step_s: float,
    columns: Sequence[str] | None = None,
    chunk_points: int = 10_000,
    progress: Callable[[int, int], None] | None = None,
    client: httpx.Client | None = None,
    hosts: Mapping[str, Collection[str]] | None = None,
    on_skip: Callable[[SkippedSeries], None] | None = None,
) -> pd.DataFrame:
    """Range-query every catalogue field from Prometheus and join them into a history frame.

    `hosts` ({label: host names}, as `list_hosts` gives them): only those hosts' series, by a
    label matcher on the label each host reports under (a replica's share of the fleet).
    A series that cannot be stored (`identity.problem`, an index label no integer reads, an
    infinite value) is left out and handed to `on_skip` once (logged as a warning without it):
    one odd series must not stop the import of the fleet.
    """
    start_ms, end_ms = round(_unix(start) * 1000), round(_unix(end) * 1000)
    step_ms = round(step_s * 1000)  # Prometheus keeps milliseconds
    span = f"between {_iso(start)} and {_iso(end)}"
    _check_range(start, end, step_s, chunk_points)
    if hosts is not None and not any(hosts.values()):
        raise NoSeries(f"Prometheus at {url.rstrip('/')}: no host asked for {span}")
    with _api(url, client) as api:
        names, fields = _fields(api, columns, start_ms / 1000, end_ms / 1000)
        steps = (end_ms - start_ms) // step_ms + 1
        chunks = [
            (start_ms + i * step_ms, start_ms + min(i + chunk_points, steps) * step_ms - step_ms)
            for i in range(0, steps, chunk_points)
        ]
        labels: dict[tuple[str, int, str, str], int] = {}
        skipped: dict[tuple[tuple[str, str], ...], SkippedSeries] = {}
        found: dict[str, _Series] = {}
        total, done = len(fields) * len(chunks), 0
        for f in fields:
            expr = f"max by ({', '.join(GROUP_LABELS)}) ({host_selector(f.metric_name, hosts)})"
            acc = found.setdefault(f.name, _Series())
            # A gauge is kept as float32 (`history.metric_dtype`): a larger value is as unusable as an infinity.
            limit = float(np.finfo(history.metric_dtype(f.name)).max)
            for lo, hi in chunks:
                data = api.get(
                    "/api/v1/query_range",
                    {"query": expr, "start": f"{lo / 1000:.3f}", "end": f"{hi / 1000:.3f}",
                     "step": f"{step_ms / 1000:.3f}"},
                )  # fmt: skip
                _collect(data, labels, acc, skipped)
                done += 1
                if progress is not None:
                    progress(done, total)
            _drop_bad_values(acc, labels, f.metric_name, limit, skipped)
    for s in skipped.values():
        if on_skip is not None:
            on_skip(s)
        else:
            log.warning("series %s left out: %s (%s)", s.name(), s.why, s.reason)
    frame = _join(found, labels, names, start_ms, step_ms)
    if frame is None:
        raise NoSeries(f"Prometheus at {url.rstrip('/')}: no GPU series found {span}")
    out = validate(frame, source=f"Prometheus at {url.rstrip('/')}")
    if "xid" in out.columns:
        # DCGM_FI_DEV_XID_ERRORS holds the last code ever seen; the history wants the codes
        # of each interval, or every later sample would count the same XID again.
        out["xid"] = history.xid_from_last_seen(out, out["xid"]).astype(out["xid"].dtype)
    return out


def _re2_alternatives(names: Collection[str]) -> str:
    """An RE2 alternation matching exactly `names` (Prometheus anchors label regexes)."""
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", n) for n in sorted(names))


def host_selector(metric: str, hosts: Mapping[str, Collection[str]] | None) -> str:
    """PromQL for `metric`'s series of `hosts` ({label: names}) only; all of them for None.

    The label a series' host is read from is the first of `HOST_LABELS` it has, so each
    label's matcher also requires the labels before it to be absent: a series is selected
    exactly when `_collect` would name one of the hosts.
    """
    if hosts is None:
        return metric
    parts = []
    for i, label in enumerate(HOST_LABELS):
        names = hosts.get(label) or ()
        if not names:
            continue
        rx = _re2_alternatives(names)
        if label == "instance":
            rx = f"({rx})(:[0-9]+)?"
        absent = "".join(f'{earlier}="",' for earlier in HOST_LABELS[:i])
        parts.append(f"{metric}{{{absent}{label}=~{json.dumps(rx)}}}")
    return " or ".join(parts) if parts else f'{metric}{{__name__=""}}'


def list_hosts(url: str, start: datetime, end: datetime, *, client: httpx.Client | None = None) -> dict[str, set[str]]:
    """The hosts with GPU series in [start, end], by the label each is named by ({label: names}).

    Asks the label-values API (index only, no samples) about one metric every GPU exporter has:
    the first of the history columns' metrics Prometheus holds (normally DCGM_FI_DEV_GPU_TEMP).
    """
    window = {"start": f"{_unix(start):.3f}", "end": f"{_unix(end):.3f}"}
    out: dict[str, set[str]] = {label: set() for label in HOST_LABELS}
    with _api(url, client) as api:
        on_server = set(api.get("/api/v1/label/__name__/values", window) or ())
        metric = next(
            (f.metric_name for f in catalog.FIELDS if f.name in catalog.HISTORY_COLUMNS and f.metric_name in on_server),
            None,
        )
        if metric is None:
            return out
        for i, label in enumerate(HOST_LABELS):
            absent = "".join(f',{earlier}=""' for earlier in HOST_LABELS[:i])
            match = f'{{__name__="{metric}",UUID!=""{absent}}}'
            values = api.get(f"/api/v1/label/{label}/values", {**window, "match[]": match}) or ()
            for v in values:
                name = _host_name(label, str(v))
                if name:
                    out[label].add(name)
    return out


def _gpu_index(m: Mapping[str, str]) -> int:
    """The `gpu` label, else the N of `device="nvidiaN"`, else -1 (unknown).

    ValueError for a `gpu` label of digits no integer reads (`²` is a digit to str.isdigit()).
    """
    text = m.get("gpu") or ""
    if not text.isdigit():
        found = _DIGITS.search(m.get("device", ""))
        text = found.group(1) if found else ""
    return int(text) if text else identity.UNKNOWN_INDEX


def _series_id(m: Mapping[str, str], labels: dict[tuple[str, int, str, str], int]) -> int | tuple[str, str]:
    """The id of a series' GPU (UUID, index, model, host) in `labels`, added when new; or (reason, why)
    where the store cannot keep that identity (checked once per GPU and import, not once per series)."""
    try:
        index = _gpu_index(m)
    except ValueError:
        return identity.BAD_INDEX, f"the GPU index {identity.shown(m.get('gpu') or '')} is no integer"
    # dcgm-exporter renamed Hostname to hostname (2026); a relabelled setup may have
    # only Prometheus's own instance label (host:port), whose port says nothing.
    key = (str(m["UUID"]), index, str(m.get("modelName") or "unknown"), _host_of(m) or "unknown")
    sid = labels.get(key)
    if sid is None:
        wrong = identity.problem(*key)
        if wrong is not None:
            return wrong
        sid = labels[key] = len(labels)
    return sid


def _collect(
    data: Any,
    labels: dict[tuple[str, int, str, str], int],
    acc: _Series,
    skipped: dict[tuple[tuple[str, str], ...], SkippedSeries],
) -> None:
    """Append one query_range answer's per-GPU points to `acc` (series without UUID are not a GPU's).

    A series whose identity cannot be stored goes to `skipped` instead, by its identity labels:
    named once per import.
    """
    for series in (data or {}).get("result", ()):
        m = series.get("metric", {})
        values = series.get("values") or ()
        if not m.get("UUID") or not values:
            continue  # not a per-GPU series
        sid = _series_id(m, labels)
        if isinstance(sid, tuple):
            named = tuple((k, str(m[k])) for k in _IDENTITY_LABELS if m.get(k))
            skipped.setdefault(named, SkippedSeries(*sid, named))
            continue
        n = len(values)
        acc.sid.append(np.full(n, sid, dtype=np.int64))
        acc.t_ms.append(np.rint(np.fromiter((p[0] for p in values), np.float64, n) * 1000).astype(np.int64))
        # Prometheus writes values as strings; "NaN" and "+Inf" parse as floats too.
        acc.value.append(np.array([p[1] for p in values], dtype=np.float64))


def _drop_bad_values(
    acc: _Series,
    labels: dict[tuple[str, int, str, str], int],
    metric: str,
    limit: float,
    skipped: dict[tuple[tuple[str, str], ...], SkippedSeries],
) -> None:
    """Take out of `acc` (one metric's series) every series with a value past ±`limit` (an infinity, or
    a gauge past float32) into `skipped`: a history cannot hold it. One vectorised pass, not one per series."""
    if not acc.value:
        return
    value = np.concatenate(acc.value)
    bad = np.abs(value) > limit  # NaN compares False: no data is fine
    if not bad.any():
        return
    sid = np.concatenate(acc.sid)
    ident = list(labels)  # position = series id
    dropped = set(np.unique(sid[bad]).tolist())
    for s in sorted(dropped):
        uuid, index, model, host = ident[s]
        named = (("__name__", metric), ("UUID", uuid), ("gpu", str(index)), ("modelName", model), ("host", host))
        worst = float(value[bad & (sid == s)][0])
        skipped.setdefault(named, SkippedSeries(identity.BAD_VALUE, f"value {worst!r}", named))
    keep = [i for i, a in enumerate(acc.sid) if int(a[0]) not in dropped]
    acc.sid[:] = [acc.sid[i] for i in keep]
    acc.t_ms[:] = [acc.t_ms[i] for i in keep]
    acc.value[:] = [acc.value[i] for i in keep]


def _join(
    found: dict[str, _Series],
    labels: dict[tuple[str, int, str, str], int],
    columns: list[str],
    start_ms: int,
    step_ms: int,
) -> pd.DataFrame | None:
    """One row per (UUID, step) over all columns; None when no column has a point."""
    if not labels:
        return None
    ident = list(labels)  # position = series id
    uuid_codes, uuids = pd.factorize(pd.Series([k[0] for k in ident]))
    stride = len(uuids)  # keys step * stride + gpu: time order, as a history frame wants; exact int64
    per_col: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, acc in found.items():
        if not acc.sid:
            continue
        sid = np.concatenate(acc.sid)
        # Row key: the step on the query grid and the GPU (by UUID, not by label set).
        # Where two label sets of one GPU answer at one step, the first series wins.
        step = np.rint((np.concatenate(acc.t_ms) - start_ms) / step_ms).astype(np.int64)
        key = step * stride + uuid_codes[sid]
        key_u, first = np.unique(key, return_index=True)
        per_col[name] = (key_u, sid[first], np.concatenate(acc.value)[first])
    if not per_col:
        return None
    keys = np.unique(np.concatenate([v[0] for v in per_col.values()]))
    sid_of_row = np.full(len(keys), -1, dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    for name in columns:
        col = np.full(len(keys), np.nan)
        if name in per_col:
            key_u, sid, value = per_col[name]
            pos = np.searchsorted(keys, key_u)
            col[pos] = value
            unset = sid_of_row[pos] < 0
            sid_of_row[pos[unset]] = sid[unset]
        out[name] = col
    ident_arr = np.array(ident, dtype=object)[sid_of_row]
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime(start_ms + (keys // stride) * step_ms, unit="ms", utc=True),
            "hostname": ident_arr[:, 3],
            "gpu_uuid": uuids.to_numpy()[keys % stride],
            "gpu_index": ident_arr[:, 1].astype(np.int64),
            "model_name": ident_arr[:, 2],
            **out,
        }
    )


WORKLOAD_LABELS = ("pod", "namespace", "container", "hpc_job", "GPU_I_ID", "GPU_I_PROFILE")
"""dcgm-exporter's labels (and ours) for the workload on a GPU or a MIG instance."""
WORKLOAD_METRIC = "DCGM_FI_DEV_FB_USED"
"""A default field that exists per GPU and per MIG instance: every workload's series carry its labels."""


def workloads_at(
    url: str, at: datetime, *, lookback_s: float = 300.0, client: httpx.Client | None = None
) -> dict[str, tuple[str, list[dict[str, str]]]]:
    """The workloads on each GPU as its exporter labelled them at `at`: UUID -> (host, label sets); a GPU
    with series but no pod or job label has an empty list (what ran there ended)."""
    by = ", ".join(("UUID", *HOST_LABELS, *WORKLOAD_LABELS))
    query = f'group by ({by}) (last_over_time({WORKLOAD_METRIC}{{UUID!=""}}[{int(lookback_s)}s]))'
    with _api(url, client) as api:
        data = api.get("/api/v1/query", {"query": query, "time": f"{_unix(at):.3f}"}) or {}
    out: dict[str, tuple[str, list[dict[str, str]]]] = {}
    for series in data.get("result", ()) if isinstance(data, dict) else ():
        m = series.get("metric", {})
        uuid = str(m.get("UUID", ""))
        host = _host_of(m)
        if not uuid:
            continue
        _, sets = out.setdefault(uuid, (host, []))
        labels = {k: str(m[k]) for k in WORKLOAD_LABELS if m.get(k)}
        if "pod" in labels or "hpc_job" in labels:
            sets.append(labels)
    return out


RAIL_METRIC = "gpuhealth_infiniband_port_gpu_info"
"""1 for each GPU a port serves (collector.infiniband): each GPU's rail, by `device` and `port`."""


def rails_at(
    url: str, at: datetime, *, lookback_s: float = 300.0, client: httpx.Client | None = None
) -> dict[str, tuple[str, str]]:
    """Each GPU's InfiniBand/RoCE ports as its collector tied them at `at`: UUID -> (host, "mlx5_3/1"),
    several ports joined by ", " (core.infiniband.rail_name); a GPU without a tied port is left out."""
    by = ", ".join(("UUID", "device", "port", *HOST_LABELS))
    query = f'group by ({by}) (last_over_time({RAIL_METRIC}{{UUID!=""}}[{int(lookback_s)}s]))'
    with _api(url, client) as api:
        data = api.get("/api/v1/query", {"query": query, "time": f"{_unix(at):.3f}"}) or {}
    ports: dict[str, tuple[str, set[tuple[str, str]]]] = {}
    for series in data.get("result", ()) if isinstance(data, dict) else ():
        m = series.get("metric", {})
        uuid, device, port = (str(m.get(k, "")) for k in ("UUID", "device", "port"))
        if uuid and device and port:
            ports.setdefault(uuid, (_host_of(m), set()))[1].add((device, port))
    return {u: (host, rail_name(p)) for u, (host, p) in ports.items()}


BUS_METRIC = catalog.BY_NAME["gpu_temp_c"].metric_name
"""The metric whose labels give each GPU's PCI bus id (`bus_ids_at`): every GPU exporter has it."""


def bus_ids_at(
    url: str, at: datetime, *, lookback_s: float = 300.0, client: httpx.Client | None = None
) -> dict[str, tuple[str, str]]:
    """Each GPU's PCI bus id as its exporter labels its series at `at` (dcgm-exporter's and ours:
    `pci_bus_id`): UUID -> (host, "00000000:41:00.0"); a GPU whose series carry none is left out."""
    by = ", ".join(("UUID", "pci_bus_id", *HOST_LABELS))
    query = f'group by ({by}) (last_over_time({BUS_METRIC}{{UUID!="",pci_bus_id!=""}}[{int(lookback_s)}s]))'
    with _api(url, client) as api:
        data = api.get("/api/v1/query", {"query": query, "time": f"{_unix(at):.3f}"}) or {}
    out: dict[str, tuple[str, str]] = {}
    for series in data.get("result", ()) if isinstance(data, dict) else ():
        m = series.get("metric", {})
        uuid, bus = str(m.get("UUID", "")), str(m.get("pci_bus_id", ""))
        if uuid and bus:
            out[uuid] = (_host_of(m), bus)
    return out
