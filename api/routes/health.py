"""/healthz and /readyz (always open), /metrics, and the schema and its page while reads are closed.

/healthz and /readyz are `async` and answer from the event loop: they answer even while every
thread of the pool waits on the database.
"""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from api import schemas
from api.deps import ConfigDep, MetricsDep, StoreDep
from api.errors import RETRY_AFTER_S
from api.routes import docs as pages
from store import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 4.0
"""/readyz answers 503 when the database has not answered within this (the store's own
ping waits at most 3 s for SQLite's write lock, PostgreSQL's connect timeout is 3 s)."""

probes = APIRouter(tags=["health"])
"""Liveness and readiness: open whatever the settings say."""
scrape = APIRouter(tags=["health"])
"""/metrics: open, or behind the token (`ApiConfig.scrape_open`)."""
docs = APIRouter()
"""The schema and its page, behind the token: included only while reads are closed (FastAPI's
own, unauthenticated ones are turned off then)."""


@docs.get("/openapi.json", include_in_schema=False)
async def openapi_json(request: Request) -> JSONResponse:
    """The OpenAPI schema."""
    return JSONResponse(request.app.openapi())


@docs.get("/docs", include_in_schema=False)
async def docs_page(request: Request) -> HTMLResponse:
    """The schema's Swagger UI page."""
    return pages.swagger_ui(request, oauth2_redirect=False)


@probes.get(
    "/healthz",
    response_model=schemas.Health,
    responses={503: {"model": schemas.Health, "description": "sampling is not current"}},
)
async def healthz(response: Response, config: ConfigDep) -> schemas.Health:
    """The process is alive; with an in-process collector, sampling is current too."""
    if config.collector_health is not None:
        ok, why = config.collector_health()
        if not ok:
            response.status_code = 503
            return schemas.Health(status="unhealthy", detail=why)
        return schemas.Health(status="ok", detail=why)
    return schemas.Health(status="ok", detail="api up")


@probes.get(
    "/readyz",
    response_model=schemas.Health,
    responses={503: {"model": schemas.Health, "description": "the database does not answer"}},
)
async def readyz(response: Response, store: StoreDep, request: Request) -> schemas.Health:
    """The database answers and (SQLite) takes writes."""
    # On threads of its own (`app.state.ping_pool`): a full thread pool (writes waiting on a
    # locked database) must not delay the answer.
    pool: ThreadPoolExecutor = request.app.state.ping_pool
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(pool, store.ping), READY_TIMEOUT_S)
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


@scrape.get("/metrics", response_class=PlainTextResponse)
def prometheus_metrics(metrics: MetricsDep, config: ConfigDep) -> Response:
    """Risk and decisions per GPU, the service's own health, and the collector's series."""
    body = metrics.render()
    if config.extra_metrics is not None:
        body += config.extra_metrics()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
