"""Typed dependencies of the routes: the store, the settings, the API's metrics, and the token checks.

Each is `async`: none does I/O, and a sync dependency costs a trip through the thread pool
per request. `create_app` keeps what they hand out on `app.state`. Tests can replace
`get_config` through `app.dependency_overrides` (the token, the collector's health, the extra
metrics); which routes need the token is settled when the app is built. GET /v1/gpus/{uuid}
takes the store from `app.state` itself: a dependency would add a step to the hottest request.
"""

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.config import ApiConfig
from api.errors import RETRY_AFTER_S
from api.metrics import ApiMetrics
from store import Store

WRITES_IN_FLIGHT = 4
"""Write requests that may wait on the database at once: SQLite takes one writer at a time, and
each waiting write holds one of the thread pool's 40 threads, which reads need too."""
WRITE_QUEUE_S = 2.0
"""How long a write waits for one of those places before it is answered 503."""


async def get_store(request: Request) -> Store:
    """The store the app serves."""
    store: Store = request.app.state.store
    return store


async def get_config(request: Request) -> ApiConfig:
    """The API's settings."""
    config: ApiConfig = request.app.state.config
    return config


async def get_metrics(request: Request) -> ApiMetrics:
    """The collector behind /metrics (the API counts recorded failures in it)."""
    metrics: ApiMetrics = request.app.state.metrics
    return metrics


StoreDep = Annotated[Store, Depends(get_store)]
ConfigDep = Annotated[ApiConfig, Depends(get_config)]
MetricsDep = Annotated[ApiMetrics, Depends(get_metrics)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))]


def _check(creds: HTTPAuthorizationCredentials | None, token: str | None, what: str) -> None:
    if token is None:
        raise HTTPException(403, f"{what} are disabled: the server has no token (set GPUHEALTH_TOKEN)")
    if creds is None:
        raise HTTPException(401, "missing Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"})
    if not secrets.compare_digest(creds.credentials.encode(), token.encode()):
        raise HTTPException(403, "invalid token")


async def can_read(creds: Credentials, config: ConfigDep) -> None:
    """The bearer token, for reads while they are closed (open reads do not run this at all)."""
    _check(creds, config.bearer_token, "reads")


async def can_write(creds: Credentials, config: ConfigDep, request: Request) -> AsyncIterator[None]:
    """The bearer token, then one of `WRITES_IN_FLIGHT` places, held until the answer is sent."""
    _check(creds, config.bearer_token, "writes")
    places: asyncio.Semaphore = request.app.state.write_places
    try:
        await asyncio.wait_for(places.acquire(), WRITE_QUEUE_S)
    except TimeoutError:
        raise HTTPException(
            503, "database busy: too many writes waiting", headers={"Retry-After": str(RETRY_AFTER_S)}
        ) from None
    try:
        yield
    finally:
        places.release()


ReadAuth = Depends(can_read)
"""For `dependencies=[...]` of reads while they are closed."""
WriteAuth = Depends(can_write)
"""For `dependencies=[...]` of every write."""
