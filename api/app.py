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

The routes live in `api.routes` (one module per resource), their dependencies in `api.deps`.
"""

import asyncio
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, params
from fastapi.routing import APIRoute

from api.config import BODY_TIMEOUT_S, ApiConfig
from api.deps import WRITE_QUEUE_S, WRITES_IN_FLIGHT, ReadAuth, WriteAuth
from api.errors import HANDLERS, RETRY_AFTER_S, UNAVAILABLE, route_errors
from api.metrics import ApiMetrics
from api.middleware import BodyLimit
from api.routes import actuator, alerts, decisions, docs, failures, gpus, health, model, nodes, remediations
from api.routes.alerts import MAX_ERRORS_SHOWN
from api.routes.health import READY_TIMEOUT_S
from core import __version__
from store import Store

__all__ = [
    "BODY_TIMEOUT_S",
    "MAX_ERRORS_SHOWN",
    "READY_TIMEOUT_S",
    "RETRY_AFTER_S",
    "WRITES_IN_FLIGHT",
    "WRITE_QUEUE_S",
    "ApiConfig",
    "BodyLimit",
    "create_app",
]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the settings' start hooks, serve, run the stop hooks, then let /readyz's threads go."""
    config: ApiConfig = app.state.config
    for fn in config.on_start:
        fn()
    try:
        yield
    finally:
        for fn in reversed(config.on_stop):
            fn()
        app.state.ping_pool.shutdown(wait=False, cancel_futures=True)


def create_app(store: Store, config: ApiConfig | None = None) -> FastAPI:
    """The FastAPI application over `store`."""
    cfg = config or ApiConfig()
    closed = not cfg.read_open
    app = FastAPI(
        title="gpuhealth",
        version=__version__,
        description="GPU fleet health: risk per GPU, decisions (ok, watch, demote, drain, rma) and why.",
        lifespan=lifespan,
        # The pages are ours (`docs.pages`: no CDN); closed reads close the schema and its page too
        # (`health.docs` serves them behind the token).
        docs_url=None,
        redoc_url=None,
        openapi_url=None if closed else "/openapi.json",
        responses=UNAVAILABLE,  # each route adds what it can answer besides (`_add_routes`)
        exception_handlers=HANDLERS,
    )
    app.state.store = store
    app.state.config = cfg
    app.state.metrics = ApiMetrics(store, cfg.scorer, cfg.buffer, cfg.host_label, cfg.actuator)
    app.state.ping_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpuhealth-readyz")
    app.state.write_places = asyncio.Semaphore(WRITES_IN_FLIGHT)
    app.add_middleware(BodyLimit, limit=cfg.max_request_bytes, timeout_s=cfg.body_timeout_s)
    docs.mount_assets(app)
    _include_routers(app, cfg)
    return app


def _include_routers(app: FastAPI, cfg: ApiConfig) -> None:
    """Every resource's routes; reads (and /metrics) behind the token only when the settings close them."""
    read = [] if cfg.read_open else [ReadAuth]  # open reads skip the dependency entirely
    if cfg.read_open:
        _add_routes(app, docs.pages)
    else:
        _add_routes(app, health.docs, read)
    _add_routes(app, health.probes)
    _add_routes(app, health.scrape, [] if cfg.scrape_open else [ReadAuth])
    # In this order: it is the order of /openapi.json's paths, and of the methods of /v1/failures.
    _add_routes(app, gpus.reads, read)
    _add_routes(app, nodes.reads, read)
    _add_routes(app, decisions.reads, read)
    _add_routes(app, decisions.writes)
    _add_routes(app, failures.writes)
    _add_routes(app, failures.reads, read)
    _add_routes(app, alerts.writes)
    _add_routes(app, alerts.reads, read)
    _add_routes(app, model.reads, read)
    _add_routes(app, actuator.actions_reads, read)
    _add_routes(app, actuator.actuator_reads, read)
    _add_routes(app, actuator.actuator_writes)
    _add_routes(app, actuator.node_writes)
    _add_routes(app, remediations.reads, read)
    _add_routes(app, remediations.agent_reads, read)
    _add_routes(app, remediations.writes)


def _add_routes(app: FastAPI, router: APIRouter, dependencies: Sequence[params.Depends] = ()) -> None:
    """`router`'s routes, added to the app itself with `dependencies` ahead of their own.

    Not `app.include_router`: FastAPI (0.16x) keeps an included router apart and matches each
    request's path through it twice, which cost GET /v1/gpus/{uuid} about an eighth of its time.
    The attributes copied are those FastAPI's own inclusion carries over. The errors the route
    can answer for what it takes (a token, parameters, a body) are documented with its own.
    """
    for route in router.routes:
        if not isinstance(route, APIRoute):
            raise TypeError(f"{route!r}: only FastAPI routes are copied")
        deps = [*dependencies, *route.dependencies]
        gated = any(d in (ReadAuth, WriteAuth) for d in deps)
        app.router.add_api_route(
            route.path,
            route.endpoint,
            response_model=route.response_model,
            status_code=route.status_code,
            tags=route.tags,
            dependencies=deps,
            summary=route.summary,
            description=route.description,
            response_description=route.response_description,
            responses={**route_errors(route, gated), **route.responses},
            deprecated=route.deprecated,
            methods=route.methods,
            operation_id=route.operation_id,
            response_model_include=route.response_model_include,
            response_model_exclude=route.response_model_exclude,
            response_model_by_alias=route.response_model_by_alias,
            response_model_exclude_unset=route.response_model_exclude_unset,
            response_model_exclude_defaults=route.response_model_exclude_defaults,
            response_model_exclude_none=route.response_model_exclude_none,
            include_in_schema=route.include_in_schema,
            response_class=route.response_class,
            name=route.name,
            callbacks=route.callbacks,
            openapi_extra=route.openapi_extra,
            generate_unique_id_function=route.generate_unique_id_function,
            strict_content_type=route.strict_content_type,
            max_body_size=route.max_body_size,
        )
