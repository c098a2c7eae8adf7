"""The REST API (FastAPI, under /v1), /metrics, /healthz and /readyz.

Reads can be open or need the token (`read_open`); writes always need
`Authorization: Bearer <token>`, compared in constant time, and are refused (403)
when no token is configured. A database that is down answers 503 with Retry-After.
"""

import functools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from api import schemas
from api.metrics import ApiMetrics
from api.service import IngestBuffer, Scorer
from gpuhealth import __version__
from store import NotFound, Store, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a 503 asks clients to wait: about the ingest buffer's retry period, a few times over."""
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
    max_request_bytes: int = 1_048_576
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
    """Refuse request bodies over `limit` bytes with 413, declared or streamed.

    Not FastAPI's own `max_body_size`: it answers a declared oversize in plain text
    ("Content Too Large"), without the limit, and lets a malformed Content-Length through;
    every other error of ours is one line of JSON that says what to change.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0
        refused = False

        async def counted() -> Message:
            # Past the limit, answer 413 at once and tell the app the client went away: an
            # exception here would reach FastAPI's body parsing, which turns it into a 400.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await _too_large(send, self.limit)
                    return {"type": "http.disconnect"}
            return msg

        async def unless_refused(msg: Message) -> None:
            if not refused:  # after the 413, whatever the app answers is dropped
                await send(msg)

        try:
            await self.app(scope, counted, unless_refused)
        except ClientDisconnect:
            if not refused:
                raise


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail":"request body too large: the limit is {limit} bytes"}}'.encode()
    await send({
        "type": "http.response.start", "status": 413,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _one_line(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def create_app(store: Store, config: ApiConfig | None = None) -> FastAPI:
    """The FastAPI application over `store`."""
    cfg = config or ApiConfig()
    metrics = ApiMetrics(store, cfg.scorer, cfg.buffer, cfg.host_label)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for fn in cfg.on_start:
            fn()
        try:
            yield
        finally:
            for fn in reversed(cfg.on_stop):
                fn()

    app = FastAPI(
        title="gpuhealth",
        version=__version__,
        description="GPU fleet health: risk per GPU, decisions (ok, watch, demote, drain, rma) and why.",
        lifespan=lifespan,
        responses={
            401: {"model": schemas.Problem, "description": "token missing"},
            403: {"model": schemas.Problem, "description": "token wrong, or writes disabled"},
            503: {"model": schemas.Problem, "description": "database unreachable; retry after Retry-After"},
        },
    )
    app.add_middleware(BodyLimit, limit=cfg.max_request_bytes)
    bearer = HTTPBearer(auto_error=False)

    def _check(creds: HTTPAuthorizationCredentials | None, what: str) -> None:
        if cfg.token is None:
            raise HTTPException(403, f"{what} are disabled: the server has no token (set GPUHEALTH_TOKEN)")
        if creds is None:
            raise HTTPException(401, "missing Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(creds.credentials.encode(), cfg.token.encode()):
            raise HTTPException(403, "invalid token")

    # async: they do no I/O, and a sync dependency costs a trip through the thread pool per request
    async def can_write(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        _check(creds, "writes")

    async def can_read(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if not cfg.read_open:
            _check(creds, "reads")

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Request, err: StoreUnavailable) -> JSONResponse:
        return JSONResponse(
            {"detail": f"database unavailable: {err}"}, 503, headers={"Retry-After": str(RETRY_AFTER_S)}
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

    @app.get("/healthz", response_model=schemas.Health, tags=["health"])
    def healthz(response: Response) -> schemas.Health:
        """The process is alive; with an in-process collector, sampling is current too."""
        if cfg.collector_health is not None:
            ok, why = cfg.collector_health()
            if not ok:
                response.status_code = 503
                return schemas.Health(status="unhealthy", detail=why)
            return schemas.Health(status="ok", detail=why)
        return schemas.Health(status="ok", detail="api up")

    @app.get("/readyz", response_model=schemas.Health, tags=["health"])
    def readyz(response: Response) -> schemas.Health:
        """The database answers."""
        try:
            store.ping()
        except StoreError as err:
            response.status_code = 503
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
            return schemas.Health(status="unavailable", detail=f"database unavailable: {err}")
        return schemas.Health(status="ok", detail="database reachable")

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"])
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

    async def lookup(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """A point lookup. On SQLite it runs inline: a WAL read of a few indexed rows never waits
        on a writer and takes less than the thread-pool hop. PostgreSQL waits on the network: a thread."""
        if inline:
            return fn(*args, **kw)
        return await run_in_threadpool(functools.partial(fn, *args, **kw))

    gpu_detail = TypeAdapter(schemas.GpuDetail)

    @app.get("/v1/gpus/{uuid}", response_model=schemas.GpuDetail, dependencies=read, tags=["gpus"])
    async def get_gpu(uuid: Uuid) -> Response:
        """One GPU: identity, latest sample, risk per mode, decision and reasons."""
        item = await lookup(store.get_gpu, uuid)
        # Validated and written as JSON by pydantic in one step (the hottest endpoint).
        return Response(gpu_detail.dump_json(gpu_detail.validate_python(item)), media_type="application/json")

    @app.get("/v1/gpus/{uuid}/risk", response_model=schemas.RiskHistory, dependencies=read, tags=["gpus"])
    async def risk_history(
        uuid: Uuid,
        since: schemas.UtcTime | None = None,
        until: schemas.UtcTime | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> dict[str, Any]:
        """Risk over time (oldest first)."""
        points = await lookup(store.risk_history, uuid, since=since, until=until, limit=limit)
        return {"uuid": uuid, "points": points}

    @app.get("/v1/gpus/{uuid}/probes", response_model=list[schemas.ProbeOut], dependencies=read, tags=["gpus"])
    async def probe_results(uuid: Uuid, limit: Limit = 100) -> list[dict[str, Any]]:
        """The GPU's latest probe results (GEMM, memtest, bandwidth, PCIe), newest first."""
        results: list[dict[str, Any]] = await lookup(store.probe_results, uuid, limit=limit)
        return results

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

    @app.post("/v1/alertmanager", response_model=schemas.Stored, dependencies=write, tags=["alerts"])
    def alertmanager(body: schemas.AmWebhook) -> dict[str, int]:
        """Alertmanager webhook (payload version 4): alerts are stored and linked to GPUs by their UUID label."""
        payload = body.model_dump(mode="json")
        return {"stored": store.add_alertmanager(payload, received_at=datetime.now(UTC))}

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
