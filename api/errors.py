"""Error answers: one line of JSON each, and a database that is down never described to clients."""

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from store import NotFound, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a 503 asks clients to wait: about the ingest buffer's retry period, a few times over."""


def one_line(err: RequestValidationError | ValidationError) -> str:
    """The validation errors as one line: where, and what is wrong there."""
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


async def unavailable(request: Request, err: StoreUnavailable) -> JSONResponse:
    """503 with Retry-After; the answer says why (refused, locked, timed out), never where."""
    log.warning("%s %s: %s", request.method, request.url.path, err)  # where, for the operator
    return JSONResponse(
        {"detail": f"database unavailable: {err.reason}"}, 503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


async def not_found(_: Request, err: NotFound) -> JSONResponse:
    """404: no such GPU, node or decision."""
    return JSONResponse({"detail": str(err)}, 404)


async def refused(_: Request, err: StoreError) -> JSONResponse:
    """The store refused the request (e.g. a failure for a GPU it does not know)."""
    return JSONResponse({"detail": str(err)}, 422)


async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
    """422 with every invalid field on one line."""
    return JSONResponse({"detail": one_line(err)}, 422)


HANDLERS: dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]] = {
    StoreUnavailable: unavailable,
    NotFound: not_found,
    StoreError: refused,
    RequestValidationError: invalid,
}
"""The app's `exception_handlers`: the store's errors and invalid requests, answered as above."""
