"""The REST API (FastAPI, under /v1), /metrics, /healthz and /readyz.

Reads can be open or need the token (`read_open`: the API, /docs and /openapi.json;
/metrics follows it unless `metrics_open` says otherwise); writes always need
`Authorization: Bearer <token>`, compared in constant time, and are refused (403)
when no token is configured. A database that is down answers 503 with Retry-After,
and no answer names the database's host, port or user.

A locked or hung database never stalls the event loop: blocking store calls run in the
thread pool, at most `WRITES_IN_FLIGHT` writes hold a thread at once (the rest wait
`WRITE_QUEUE_S`, then 503), and /healthz and /readyz answer from the loop and their own
threads within `READY_TIMEOUT_S`.
"""

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from api import schemas
from api.metrics import ApiMetrics
from core import __version__
from service.ingest import IngestBuffer
from service.scorer import Scorer
from store import NotFound, Store, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a 503 asks clients to wait: about the ingest buffer's retry period, a few times over."""
WRITES_IN_FLIGHT = 4
"""Write requests that may wait on the database at once: SQLite takes one writer at a time, and
each waiting write holds one of the thread pool's 40 threads, which reads need too."""
WRITE_QUEUE_S = 2.0
"""How long a write waits for one of those places before it is answered 503."""
READY_TIMEOUT_S = 4.0
"""/readyz answers 503 when the database has not answered within this (the store's own
ping waits at most 3 s for SQLite's write lock, PostgreSQL's connect timeout is 3 s)."""
MAX_ERRORS_SHOWN = 10
"""Skipped alerts whose reasons a webhook answer lists."""
BODY_TIMEOUT_S = 10.0
"""A request body must arrive within this, else 408 and the connection is closed (slow clients)."""
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass
class ApiConfig:
    """What the API needs besides the store (the CLI fills it from settings)."""

    token: str | None = None
    read_open: bool = True
    metrics_open: bool | None = None
    """/metrics without the token; None: as `read_open` (Prometheus can send the bearer token)."""
    max_request_bytes: int = 1_048_576
    body_timeout_s: float = BODY_TIMEOUT_S
    host_label: str = "Hostname"
    scorer: Scorer | None = None
    buffer: IngestBuffer | None = None
    collector_health: Callable[[], tuple[bool, str]] | None = None
    """The in-process collector's health (/healthz), when one runs."""
    extra_metrics: Callable[[], bytes] | None = None
    """More exposition text for /metrics (the in-process collector's series)."""
    on_start: list[Callable[[], None]] = field(default_factory=list)
    on_stop: list[Callable[[], None]] = field(default_factory=list)


Uuid = Annotated[str, Path(min_length=1, max_length=200, description="GPU UUID, e.g. GPU-5f0c…")]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=10_000_000)]


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, declared or streamed, and bodies that
    do not arrive within `timeout_s` with 408 (a slow client must not hold a socket and a task).

    Not FastAPI's own `max_body_size`: it answers a declared oversize in plain text
    ("Content Too Large"), without the limit, and lets a malformed Content-Length through;
    every other error of ours is one line of JSON that says what to change.
    """

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _problem(send, 413, f"request body too large: the limit is {self.limit} bytes")
            return
        seen = 0
        refused = False
        complete = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s

        async def counted() -> Message:
            # Past the limit or the deadline, answer at once and tell the app the client went away:
            # an exception here would reach FastAPI's body parsing, which turns it into a 400.
            nonlocal seen, refused, complete
            if refused:
                return {"type": "http.disconnect"}
            if complete:  # the body is in: what follows is a wait for the disconnect, not timed
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                refused = True
                await _problem(send, 408, f"request body not received within {self.timeout_s:g}s")
                return {"type": "http.disconnect"}
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                complete = not msg.get("more_body", False)
                if seen > self.limit:
                    refused = True
                    await _problem(send, 413, f"request body too large: the limit is {self.limit} bytes")
                    return {"type": "http.disconnect"}
            return msg

        async def unless_refused(msg: Message) -> None:
            if not refused:  # after the 413 or 408, whatever the app answers is dropped
                await send(msg)

        try:
            await self.app(scope, counted, unless_refused)
        except ClientDisconnect:
            if not refused:
                raise


async def _problem(send: Send, status: int, detail: str) -> None:
    body = JSONResponse({"detail": detail}).body
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 408:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _one_line(err: RequestValidationError | ValidationError) -> str:
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def create_app(store: Store, config: ApiConfig | None = None) -> FastAPI:
    """The FastAPI application over `store`."""
    cfg = config or ApiConfig()
    # An empty or blank token is no token: writes are disabled (and the CLI says so), rather
    # than every write answering "invalid token".
    token = cfg.token if cfg.token and cfg.token.strip() else None
    metrics_open = cfg.read_open if cfg.metrics_open is None else cfg.metrics_open
    metrics = ApiMetrics(store, cfg.scorer, cfg.buffer, cfg.host_label)
    # /readyz's pings run on threads of their own: a full thread pool (writes waiting on a
    # locked database) must not delay the answer.
    ping_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpuhealth-readyz")
    write_places = asyncio.Semaphore(WRITES_IN_FLIGHT)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for fn in cfg.on_start:
            fn()
        try:
            yield
        finally:
            for fn in reversed(cfg.on_stop):
                fn()
            ping_pool.shutdown(wait=False, cancel_futures=True)

    closed = not cfg.read_open
    app = FastAPI(
        title="gpuhealth",
        version=__version__,
        description="GPU fleet health: risk per GPU, decisions (ok, watch, demote, drain, rma) and why.",
        lifespan=lifespan,
        # Closed reads close the schema and its page too (served below behind the token).
        docs_url=None if closed else "/docs",
        redoc_url=None if closed else "/redoc",
        openapi_url=None if closed else "/openapi.json",
        responses={
            401: {"model": schemas.Problem, "description": "token missing"},
            403: {"model": schemas.Problem, "description": "token wrong, or writes disabled"},
            503: {"model": schemas.Problem, "description": "database unreachable or busy; retry after Retry-After"},
        },
    )
    app.add_middleware(BodyLimit, limit=cfg.max_request_bytes, timeout_s=cfg.body_timeout_s)
    bearer = HTTPBearer(auto_error=False)

    def _check(creds: HTTPAuthorizationCredentials | None, what: str) -> None:
        if token is None:
            raise HTTPException(403, f"{what} are disabled: the server has no token (set GPUHEALTH_TOKEN)")
        if creds is None:
            raise HTTPException(401, "missing Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(403, "invalid token")

    async def can_write(
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> AsyncIterator[None]:
        _check(creds, "writes")
        try:
            await asyncio.wait_for(write_places.acquire(), WRITE_QUEUE_S)
        except TimeoutError:
            raise HTTPException(
                503, "database busy: too many writes waiting", headers={"Retry-After": str(RETRY_AFTER_S)}
            ) from None
        try:
            yield
        finally:
            write_places.release()

    # async: it does no I/O, and a sync dependency costs a trip through the thread pool per request
    async def can_read(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        _check(creds, "reads")

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(request: Request, err: StoreUnavailable) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, err)  # where, for the operator
        return JSONResponse(
            {"detail": f"database unavailable: {err.reason}"}, 503, headers={"Retry-After": str(RETRY_AFTER_S)}
        )

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, err: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, 404)

    @app.exception_handler(StoreError)
    async def _bad(_: Request, err: StoreError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, 422)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _one_line(err)}, 422)

    read = [] if cfg.read_open else [Depends(can_read)]  # open reads skip the dependency entirely
    write = [Depends(can_write)]

    if closed:

        @app.get("/openapi.json", include_in_schema=False, dependencies=read)
        async def openapi_json() -> JSONResponse:
            return JSONResponse(app.openapi())

        @app.get("/docs", include_in_schema=False, dependencies=read)
        async def docs_page() -> Response:
            return get_swagger_ui_html(openapi_url="/openapi.json", title="gpuhealth API")

    # async, from the event loop: they answer even while every pool thread waits on the database
    @app.get("/healthz", response_model=schemas.Health, tags=["health"])
    async def healthz(response: Response) -> schemas.Health:
        """The process is alive; with an in-process collector, sampling is current too."""
        if cfg.collector_health is not None:
            ok, why = cfg.collector_health()
            if not ok:
                response.status_code = 503
                return schemas.Health(status="unhealthy", detail=why)
            return schemas.Health(status="ok", detail=why)
        return schemas.Health(status="ok", detail="api up")

    @app.get("/readyz", response_model=schemas.Health, tags=["health"])
    async def readyz(response: Response) -> schemas.Health:
        """The database answers and (SQLite) takes writes."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(ping_pool, store.ping), READY_TIMEOUT_S)
        except (StoreError, TimeoutError) as err:
            response.status_code = 503
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
            if isinstance(err, StoreUnavailable):
                why = err.reason
            elif isinstance(err, StoreError):
                why = "the database refused the check (the server log says why)"
                log.warning("readyz: %s", err)
            else:
                why = f"no answer within {READY_TIMEOUT_S:g}s"
            return schemas.Health(status="unavailable", detail=f"database unavailable: {why}")
        return schemas.Health(status="ok", detail="database reachable")

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"],
             dependencies=[] if metrics_open else [Depends(can_read)])  # fmt: skip
    def prometheus_metrics() -> Response:
        """Risk and decisions per GPU, the service's own health, and the collector's series."""
        body = metrics.render()
        if cfg.extra_metrics is not None:
            body += cfg.extra_metrics()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/gpus", response_model=schemas.GpuPage, dependencies=read, tags=["gpus"])
    def list_gpus(
        hostname: Annotated[str | None, Query(max_length=255)] = None,
        decision: schemas.Decision | None = None,
        min_risk: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> dict[str, Any]:
        """GPUs, riskiest first; filter by host, decision or minimum risk."""
        items, total = store.list_gpus(
            hostname=hostname, decision=decision, min_risk=min_risk, limit=limit, offset=offset
        )
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    inline = store.dialect == "sqlite"
    gpu_detail = TypeAdapter(schemas.GpuDetail)

    @app.get("/v1/gpus/{uuid}", response_model=schemas.GpuDetail, dependencies=read, tags=["gpus"])
    async def get_gpu(uuid: Uuid) -> Response:
        """One GPU: identity, latest sample, risk per mode, decision and reasons."""
        item = None
        if inline:
            # A WAL read of a few indexed rows costs less than the thread-pool hop, so it runs on
            # the loop, but never waits there: a locked database sends it to a thread instead.
            with contextlib.suppress(StoreUnavailable):
                item = store.get_gpu(uuid, wait=False)
        if item is None:
            item = await run_in_threadpool(store.get_gpu, uuid)
        # Validated and written as JSON by pydantic in one step (the hottest endpoint).
        return Response(gpu_detail.dump_json(gpu_detail.validate_python(item)), media_type="application/json")

    @app.get("/v1/gpus/{uuid}/risk", response_model=schemas.RiskHistory, dependencies=read, tags=["gpus"])
    def risk_history(
        uuid: Uuid,
        since: schemas.UtcTime | None = None,
        until: schemas.UtcTime | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> dict[str, Any]:
        """Risk over time (oldest first); beyond the score retention (7 d), one point per hour: its highest risks."""
        points = store.risk_history(uuid, since=since, until=until, limit=limit)
        return {"uuid": uuid, "points": points}

    @app.get("/v1/gpus/{uuid}/probes", response_model=list[schemas.ProbeOut], dependencies=read, tags=["gpus"])
    def probe_results(uuid: Uuid, limit: Limit = 100) -> list[dict[str, Any]]:
        """The GPU's latest probe results (GEMM, memtest, bandwidth, PCIe), newest first."""
        return store.probe_results(uuid, limit=limit)

    @app.get("/v1/nodes/{hostname}", response_model=schemas.NodeDetail, dependencies=read, tags=["nodes"])
    def get_node(hostname: Annotated[str, Path(min_length=1, max_length=255)]) -> dict[str, Any]:
        """A node and its GPUs."""
        return store.get_node(hostname)

    @app.get("/v1/decisions", response_model=schemas.DecisionPage, dependencies=read, tags=["decisions"])
    def list_decisions(
        decision: schemas.Decision | None = None,
        state: Annotated[str, Query(pattern="^(active|open|acknowledged|closed|all)$")] = "active",
        hostname: Annotated[str | None, Query(max_length=255)] = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> dict[str, Any]:
        """Decisions; by default the active ones. `?decision=rma` is the RMA list, `demote` the demotion list."""
        items, total = store.decisions(
            decision=decision, state=None if state == "all" else state, hostname=hostname, limit=limit, offset=offset
        )
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    @app.post(
        "/v1/decisions/{decision_id}/ack",
        response_model=schemas.DecisionOut,
        dependencies=write,
        tags=["decisions"],
        responses={404: {"model": schemas.Problem}, 409: {"model": schemas.Problem}},
    )
    def ack_decision(
        decision_id: Annotated[int, Path(ge=1, le=2**62)], body: schemas.AckIn
    ) -> dict[str, Any] | JSONResponse:
        """Acknowledge a decision (someone is acting on it)."""
        try:
            return store.ack_decision(decision_id, by=body.by, at=datetime.now(UTC))
        except (NotFound, StoreUnavailable):
            raise
        except StoreError as err:
            return JSONResponse({"detail": str(err)}, 409)

    @app.post(
        "/v1/failures",
        response_model=schemas.FailureOut,
        status_code=201,
        dependencies=write,
        tags=["failures"],
        responses={404: {"model": schemas.Problem}},
    )
    def add_failure(body: schemas.FailureIn) -> dict[str, Any]:
        """Record a failure or RMA outcome (a label for the next training run)."""
        rec = store.add_failure(**body.model_dump())
        metrics.failure_recorded(body.mode, body.kind)
        return rec

    @app.get("/v1/failures", response_model=list[schemas.FailureOut], dependencies=read, tags=["failures"])
    def list_failures(since: schemas.UtcTime | None = None, limit: Limit = 100) -> list[dict[str, Any]]:
        """Recorded failures and RMAs, newest first."""
        return store.failures(since=since, limit=limit)

    am_alert = TypeAdapter(schemas.AmAlert)

    @app.post("/v1/alertmanager", response_model=schemas.Stored, dependencies=write, tags=["alerts"])
    def alertmanager(body: schemas.AmWebhook) -> dict[str, Any]:
        """Alertmanager webhook (payload version 4): alerts are stored and linked to GPUs by their UUID label.

        An alert that is not valid is skipped and reported in the answer; the rest of the batch is stored."""
        good, errors = [], []
        for i, raw in enumerate(body.alerts):
            try:
                good.append(am_alert.validate_python(raw).model_dump(mode="json"))
            except ValidationError as err:
                errors.append(f"alert {i}: {_one_line(err).removeprefix('invalid request: ')}")
        if errors:
            log.warning("alertmanager webhook: skipped %d invalid alert(s): %s", len(errors), "; ".join(errors[:5]))
        payload = {**body.model_dump(mode="json", exclude={"alerts"}), "alerts": good}
        stored = store.add_alertmanager(payload, received_at=datetime.now(UTC)) if good else 0
        return {"stored": stored, "skipped": len(errors), "errors": errors[:MAX_ERRORS_SHOWN]}

    @app.get("/v1/alerts", response_model=schemas.AlertPage, dependencies=read, tags=["alerts"])
    def list_alerts(
        status: Annotated[str | None, Query(pattern="^(firing|resolved)$")] = None,
        gpu_uuid: Annotated[str | None, Query(max_length=200)] = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> dict[str, Any]:
        """Alerts received from Alertmanager, newest first."""
        items, total = store.alerts(status=status, gpu_uuid=gpu_uuid, limit=limit, offset=offset)
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    return app
