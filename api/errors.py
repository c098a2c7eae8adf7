"""Error answers: one line of JSON each, and a database that is down never described to clients.

Every error is a `Problem` (`{"detail": "..."}`) and is documented as one: routes spread
`problem(...)` entries into their `responses=` for what only they answer (404, 409), and
`route_errors` gives the answers that follow from what a route takes (a token, parameters, a body).
"""

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.utils import get_flat_params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError

from api.schemas import Problem
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


Responses = dict[int | str, dict[str, Any]]
"""A route's `responses=`: status code to its OpenAPI description (and model)."""


def problem(when: str) -> dict[str, Any]:
    """One `responses=` entry: an error answered as a one-line `Problem`, and when it is answered."""
    return {"model": Problem, "description": when}


UNAVAILABLE: Responses = {503: problem("database unreachable or busy; retry after Retry-After")}
"""Any route that reads or writes the store (the app's default)."""
TOKEN_REFUSED: Responses = {
    401: problem("token missing"),
    403: problem("token wrong, or the server has none (then writes, and closed reads, are off)"),
}
"""Routes behind the token."""
INVALID: Responses = {422: problem("invalid request: every invalid field, on one line; or a value the store refused")}
"""Routes with parameters or a body (FastAPI's own rule for documenting its validation error)."""
BODY_REFUSED: Responses = {
    400: problem("body not readable (not UTF-8)"),
    408: problem("body not received in time"),
    413: problem("body over the size limit, or a malformed Content-Length"),
}
"""Routes that take a body: what FastAPI's body parsing and `api.middleware.BodyLimit` answer."""


def route_errors(route: APIRoute, gated: bool) -> Responses:
    """The errors `route` can answer for what it takes: a token (`gated`), parameters, a body.

    Declaring 422 also keeps FastAPI from documenting its own validation error, a list, where
    ours is one line.
    """
    out: Responses = dict(TOKEN_REFUSED) if gated else {}
    if route.body_field is not None:
        out |= BODY_REFUSED
    if route.body_field is not None or get_flat_params(route.dependant):
        out |= INVALID
    return out
