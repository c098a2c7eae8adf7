"""A node's view of the central service (`gpuhealth serve`): this node's GPUs and their decisions,
and the remedies addressed to them (`HttpRemedies`, the agent's side of `core.remedies`).

Used where a node acts on the service's decisions without Kubernetes or Slurm credentials:
`gpuhealth collect --nfd-features-dir` (labels through Node Feature Discovery) and node-side
health checks. One `GET /v1/nodes/{hostname}`, no retries, all of it within one deadline and at
most `max_bytes` long (`core.http_deadline`): callers run on a loop and keep what they had when
the service does not answer. A remedy report is one `POST /v1/remediations/{id}/report`, on the
same terms. Every failure is a `ServiceError` naming the URL; `ServiceUnavailable` (no answer, or
a 5xx) and `UnknownNode` (404) are the two a caller tells apart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx

from core.decisions import DECISIONS, SEVERITY, worst
from core.http_deadline import Answer, DeadlinePassed, TooLarge, read_capped
from core.remedies import TASK_KINDS, RemedyReport, RemedyTask

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
"""Deadline of the whole request, from connecting to the answer's last byte: a node lookup is one
indexed query on the service. slurmd kills its HealthCheckProgram after 60 s."""
DEFAULT_MAX_BYTES = 1 << 20
"""The longest answer read: a node of 4 GPUs answers 1.5 KB (measured); 1 MiB is not a node's answer."""
USER_AGENT = "gpuhealth-node"
MAX_GPU_INDEX = 2**31 - 1
"""The largest GPU index believed (NVML's indices are unsigned ints; the store's column is int32)."""
_PARSE_ERRORS = (ValueError, RecursionError)
"""What json.loads raises on what is not JSON for us: bad syntax or UTF-8, an integer over Python's
4300 digits (ValueError), arrays nested deeper than the interpreter's stack (RecursionError)."""


class ServiceError(Exception):
    """The service refused the request or answered something that is not a node.

    `url` is the URL asked, `status` the HTTP status (None when nothing answered) and `detail`
    the service's own one-line reason (its `{"detail": ...}`), when it gave one.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.detail = detail


class ServiceUnavailable(ServiceError):
    """No answer (refused, unresolvable, timed out) or one saying "not now" (5xx: database down or busy).

    `retry_after` is the service's Retry-After in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str,
        status: int | None = None,
        detail: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, url=url, status=status, detail=detail)
        self.retry_after = retry_after


class UnknownNode(ServiceError):
    """404 for the node: the service has no GPUs under this hostname (none reported yet, or a host
    label that does not match the hostname asked for)."""

    def __init__(self, message: str, *, url: str, hostname: str, detail: str | None = None) -> None:
        super().__init__(message, url=url, status=404, detail=detail)
        self.hostname = hostname


@dataclass(frozen=True)
class GpuView:
    """One GPU of the node as the service sees it."""

    uuid: str
    gpu_index: int | None
    decision: str | None
    """One of `core.decisions.DECISIONS`; None until the GPU was first scored."""
    risk: float | None
    """Overall risk 0..1 of the last scoring round; None when unscored or the model had no say."""
    reasons: tuple[str, ...] = ()
    model_name: str | None = None
    state: str | None = None
    """active | lost | retired"""
    scored_at: datetime | None = None


@dataclass(frozen=True)
class NodeView:
    """A node and its GPUs (the API's `NodeDetail`, the fields a node acts on)."""

    hostname: str
    gpus: tuple[GpuView, ...]
    last_seen: datetime | None = None

    @property
    def decision(self) -> str:
        """The worst decision among the node's GPUs (unscored GPUs count as ok)."""
        return worst(g.decision for g in self.gpus)

    def worst_gpu(self) -> GpuView | None:
        """The GPU whose decision is the node's: the most severe, then the riskiest, then the lowest index.

        None when every GPU is ok or unscored (or the node has none).
        """
        ranked = [g for g in self.gpus if g.decision is not None and SEVERITY[g.decision] > 0]
        if not ranked:
            return None

        def key(g: GpuView) -> tuple[int, float, int]:
            risk = g.risk if g.risk is not None else -1.0
            index = g.gpu_index if g.gpu_index is not None else 1 << 30
            return (-SEVERITY[g.decision or "ok"], -risk, index)

        return min(ranked, key=key)


def node_gpus(
    url: str,
    hostname: str,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    client: httpx.Client | None = None,
) -> NodeView:
    """This node's GPUs and decisions from the service at `url` (e.g. http://gpuhealth:8080).

    `token` is sent as a bearer token (needed when the service closes its reads). The whole
    request ends within `timeout` seconds, and an answer over `max_bytes` is not read. Raises
    `UnknownNode` (404 for the node), `ServiceUnavailable` (no answer, 5xx) or `ServiceError`
    (anything else: a refused token, not a gpuhealth answer).
    """
    base = url.rstrip("/")
    where = f"{base}/v1/nodes/{quote(hostname, safe='')}"
    headers = _headers(token)
    resp = _get(where, headers, timeout, max_bytes, client)
    if resp.status_code == 200:
        return _node(_json(resp, where), where)
    detail = _detail(resp)
    if resp.status_code == 404 and detail is not None and hostname in detail:
        raise UnknownNode(f"gpuhealth service at {base} does not know node {hostname!r}", url=where,
                          hostname=hostname, detail=detail)  # fmt: skip
    raise _refusal(resp, base, where, "GET /v1/nodes/…", token=token)


def _headers(token: str | None) -> dict[str, str]:
    # identity: a compressed answer could grow far past max_bytes in one chunk before it is counted
    headers = {"Accept": "application/json", "Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _refusal(resp: Answer, base: str, where: str, what: str, *, token: str | None) -> ServiceError:
    """The error for an answer that is not the one asked for: 5xx, a refused token, a redirect, anything else."""
    detail = _detail(resp)
    reason = f" ({detail})" if detail else ""
    if resp.status_code >= 500:
        return ServiceUnavailable(
            f"gpuhealth service at {base} cannot answer now: HTTP {resp.status_code}{reason}",
            url=where, status=resp.status_code, detail=detail, retry_after=_retry_after(resp),
        )  # fmt: skip
    if resp.status_code in (401, 403):
        hint = "a token is needed (--service-token)" if not token else "the token was refused"
        message = f"gpuhealth service at {base} refused the request: HTTP {resp.status_code}{reason}; {hint}"
    elif 300 <= resp.status_code < 400:
        message = (
            f"gpuhealth service at {base} redirects (HTTP {resp.status_code} to "
            f"{resp.headers.get('location', '?')}); give the URL it redirects to"
        )
    else:
        message = (
            f"gpuhealth service at {base}: {what} answered HTTP {resp.status_code}{reason};"
            " is this the gpuhealth service's base URL?"
        )
    return ServiceError(message, url=where, status=resp.status_code, detail=detail)


def _get(
    where: str,
    headers: dict[str, str],
    timeout: float,
    max_bytes: int,
    client: httpx.Client | None,
    *,
    method: str = "GET",
    content: bytes | None = None,
) -> Answer:
    """One request, its answer read in full; every transport failure becomes a one-line ServiceError naming the URL."""
    try:
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(httpx.Client(timeout=timeout, follow_redirects=False))
            return read_capped(
                client, where, headers=headers, timeout=timeout, max_bytes=max_bytes, method=method, content=content
            )
    except TooLarge as err:
        raise ServiceError(f"{where}: {err}; not a gpuhealth answer", url=where, status=err.status) from None
    except (DeadlinePassed, httpx.TimeoutException) as err:
        raise ServiceUnavailable(f"{where}: no answer within {timeout:g}s", url=where) from err
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as err:
        raise ServiceError(f"{where}: not an http(s) URL ({_one_line(err)})", url=where) from err
    except httpx.TransportError as err:  # refused, unresolvable, reset
        raise ServiceUnavailable(
            f"{where}: cannot connect ({_one_line(err) or type(err).__name__})", url=where
        ) from err
    except httpx.HTTPError as err:
        raise ServiceError(f"{where}: {type(err).__name__}: {_one_line(err)}", url=where) from err


def _json(resp: Answer, where: str) -> Any:
    try:
        return json.loads(resp.content)
    except _PARSE_ERRORS:
        kind = resp.headers.get("content-type", "no content type")
        raise ServiceError(f"{where}: not JSON (HTTP {resp.status_code}, {kind})", url=where,
                           status=resp.status_code) from None  # fmt: skip


def _detail(resp: Answer) -> str | None:
    """The service's one-line reason (`{"detail": "..."}`) of an error answer, if it sent one."""
    if resp.status_code == 200:
        return None
    try:
        body = json.loads(resp.content)
    except _PARSE_ERRORS:
        return None
    detail = body.get("detail") if isinstance(body, dict) else None
    return _one_line(detail) if isinstance(detail, str) else None


def _retry_after(resp: Answer) -> float | None:
    try:
        value = float(resp.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class _Bad(ValueError):
    pass


def _node(body: Any, where: str) -> NodeView:
    """The NodeView of a NodeDetail answer; a field of the wrong shape is a ServiceError naming it."""
    with _reading("node", where):
        if not isinstance(body, dict) or not isinstance(body.get("gpus"), list):
            raise _Bad("no 'gpus' list")
        hostname = body.get("hostname")
        if not isinstance(hostname, str):
            raise _Bad("'hostname' is not a string")
        gpus = tuple(_gpu(g, i) for i, g in enumerate(body["gpus"]))
        view = NodeView(hostname, gpus, _time(body.get("last_seen"), "last_seen"))
    return view


@contextlib.contextmanager
def _reading(kind: str, where: str) -> Iterator[None]:
    """A wrong shape met while reading a `kind` answer becomes one ServiceError naming it."""
    try:
        yield
    except _Bad as err:
        raise ServiceError(f"{where}: not a gpuhealth {kind} answer: {err}", url=where, status=200) from None
    except (ValueError, TypeError, ArithmeticError, RecursionError) as err:  # a shape no check foresaw
        what = _one_line(f"{type(err).__name__}: {err}")[:120]
        raise ServiceError(f"{where}: not a gpuhealth {kind} answer: {what}", url=where, status=200) from None


def _gpu(g: Any, i: int) -> GpuView:
    if not isinstance(g, dict) or not isinstance(g.get("uuid"), str):
        raise _Bad(f"gpus[{i}] has no 'uuid'")
    decision, reasons = g.get("decision"), g.get("reasons") or []
    if decision is not None and decision not in DECISIONS:
        raise _Bad(f"gpus[{i}].decision {_short(decision)} is not one of {', '.join(DECISIONS)}")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise _Bad(f"gpus[{i}].reasons is not a list of strings")
    return GpuView(
        uuid=g["uuid"],
        gpu_index=_index(g.get("gpu_index"), f"gpus[{i}].gpu_index"),
        decision=decision,
        risk=_risk(g.get("risk"), f"gpus[{i}].risk"),
        reasons=tuple(reasons),
        model_name=_str(g.get("model_name")),
        state=_str(g.get("state")),
        scored_at=_time(g.get("scored_at"), f"gpus[{i}].scored_at"),
    )


def _index(v: Any, name: str) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Bad(f"{name} {_short(v)} is not an integer")
    if abs(v) > MAX_GPU_INDEX:
        raise _Bad(f"{name} {_short(v)} is out of range")
    return v


def _risk(v: Any, name: str) -> float | None:
    """A risk is a probability: a finite number in 0..1 (the service writes null for none)."""
    if v is None:
        return None
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise _Bad(f"{name} {_short(v)} is not a number")
    try:
        risk = float(v)
    except OverflowError:  # an integer of hundreds of digits
        raise _Bad(f"{name} {_short(v)} is not a number in 0..1") from None
    if not 0.0 <= risk <= 1.0:  # NaN fails both comparisons
        raise _Bad(f"{name} {_short(risk)} is not a number in 0..1")
    return risk


def _short(v: Any, limit: int = 40) -> str:
    """`v` as repr, cut to `limit` characters: a hostile answer's value goes into a one-line error."""
    try:
        text = repr(v)
    except ValueError:  # an int over Python's 4300 digits has no repr
        return f"<{type(v).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _time(v: Any, name: str) -> datetime | None:
    if v is None:
        return None
    try:
        return datetime.fromisoformat(v)
    except (TypeError, ValueError):
        raise _Bad(f"{name} {_short(v)} is not an ISO 8601 time") from None


# -- remedies (core.remedies): the tasks addressed to a node's GPUs, and the reports of their outcome -------

MAX_REMEDIATION_ID = 2**63 - 1
"""The largest remediation id believed (the store's key is a 64-bit integer)."""
WHY_CHARS = 500
"""The longest cause kept from a task (it goes into log lines and kured's sentinel)."""


class HttpRemedies:
    """`core.remedies.RemedyService` over HTTP: one request per call, no retries, each within one deadline.

    `token` is sent as a bearer token: reports are writes, so it must be the service's write token
    (its GPUHEALTH_TOKEN), which also opens closed reads. A task the agent cannot carry out as
    written (an unknown `do` from a newer service, another node's) is left out, logged once and
    counted in `unreadable`; an answer of the wrong shape is a `ServiceError`.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        client: httpx.Client | None = None,
    ) -> None:
        self.base = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._client = client
        self._lock = threading.Lock()
        self._logged: set[tuple[int, str]] = set()
        self.unreadable = 0
        """Tasks left out since start, once per ask (see the class)."""

    def tasks(self, hostname: str) -> list[RemedyTask]:
        """The open tasks for `hostname`'s GPUs (`GET /v1/nodes/{hostname}/remedies`)."""
        where = f"{self.base}/v1/nodes/{quote(hostname, safe='')}/remedies"
        resp = _get(where, _headers(self.token), self.timeout_s, self.max_bytes, self._client)
        if resp.status_code != 200:
            raise _refusal(resp, self.base, where, "GET /v1/nodes/…/remedies", token=self.token)
        tasks, left_out = _tasks(_json(resp, where), where, hostname)
        with self._lock:
            self.unreadable += len(left_out)
            new = [x for x in left_out if x not in self._logged]
            self._logged.update(new)
            if len(self._logged) > 10_000:  # a bound, not a history: a task still left out is logged again
                self._logged = set(new)
        for rid, why in new:
            log.warning("remediation %d: task left out: %s", rid, why)
        return tasks

    def report(self, remediation_id: int, report: RemedyReport) -> bool:
        """Hand in `report` (`POST /v1/remediations/{id}/report`): True when taken, False when the task is no
        longer open (409); `ServiceError` otherwise (an unknown id, a report refused as invalid, a token)."""
        where = f"{self.base}/v1/remediations/{int(remediation_id)}/report"
        headers = {**_headers(self.token), "Content-Type": "application/json"}
        sent = report.to_dict()
        if sent["duration_s"] is not None and not math.isfinite(sent["duration_s"]):
            sent["duration_s"] = None  # JSON has no NaN, and the service refuses it
        body = json.dumps(sent, allow_nan=False).encode()
        resp = _get(where, headers, self.timeout_s, self.max_bytes, self._client, method="POST", content=body)
        if resp.status_code == 200:
            return True
        detail = _detail(resp)
        if resp.status_code == 409:
            log.info("remediation %d: report of %s %s dropped, the task is no longer open (%s)",
                     remediation_id, report.do, report.result, detail or "HTTP 409")  # fmt: skip
            return False
        reason = f" ({detail})" if detail else ""
        if resp.status_code == 404 and detail is not None and str(remediation_id) in detail:
            raise ServiceError(f"gpuhealth service at {self.base} does not know remediation {remediation_id}{reason}",
                               url=where, status=404, detail=detail)  # fmt: skip
        if resp.status_code == 422:
            raise ServiceError(f"gpuhealth service at {self.base} refused the report as invalid{reason}",
                               url=where, status=422, detail=detail)  # fmt: skip
        raise _refusal(resp, self.base, where, "POST /v1/remediations/…/report", token=self.token)


def _tasks(body: Any, where: str, hostname: str) -> tuple[list[RemedyTask], list[tuple[int, str]]]:
    """(the tasks of a remedies answer, (id, why) of each left out); a wrong shape is a ServiceError naming it."""
    with _reading("remedies", where):
        if not isinstance(body, dict) or not isinstance(body.get("tasks"), list):
            raise _Bad("no 'tasks' list")
        if body.get("hostname") != hostname:
            raise _Bad(f"'hostname' {_short(body.get('hostname'))} is not the node asked for, {hostname!r}")
        kept: list[RemedyTask] = []
        left_out: list[tuple[int, str]] = []
        for i, t in enumerate(body["tasks"]):
            task = _task(t, f"tasks[{i}]")
            if task.do not in TASK_KINDS:
                left_out.append((task.remediation_id, f"unknown task {_short(task.do)} on GPU {task.gpu_uuid}"))
            elif task.hostname != hostname:
                left_out.append((task.remediation_id, f"addressed to {_short(task.hostname)}, not {hostname!r}"))
            else:
                kept.append(task)
    return kept, left_out


def _task(t: Any, name: str) -> RemedyTask:
    """One task as written; its `do` and hostname are checked by the caller (they leave it out, not the answer)."""
    if not isinstance(t, dict):
        raise _Bad(f"{name} is not an object")
    rid = t.get("remediation_id")
    if not isinstance(rid, int) or isinstance(rid, bool) or not 0 < rid <= MAX_REMEDIATION_ID:
        raise _Bad(f"{name}.remediation_id {_short(rid)} is not a positive 64-bit integer")
    for key in ("hostname", "gpu_uuid", "do"):
        if not isinstance(t.get(key), str) or not t[key]:
            raise _Bad(f"{name}.{key} {_short(t.get(key))} is not a string")
    why = t.get("why") or ""
    if not isinstance(why, str):
        raise _Bad(f"{name}.why {_short(why)} is not a string")
    deadline = _time(t.get("deadline"), f"{name}.deadline")
    if deadline is not None and deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)  # the service writes UTC
    return RemedyTask(
        remediation_id=rid, hostname=t["hostname"], gpu_uuid=t["gpu_uuid"],
        gpu_index=_index(t.get("gpu_index"), f"{name}.gpu_index"), do=t["do"], why=_one_line(why)[:WHY_CHARS],
        deadline=deadline,
    )  # fmt: skip
