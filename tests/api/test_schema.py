"""Schemathesis against our own OpenAPI schema: every answer is one the schema describes.

Schemathesis's own engine runs its phases (examples, boundary values, fuzzing of valid and invalid
input, stateful sequences) in-process against the app, with the checks `not_a_server_error`,
`status_code_conformance` (every status answered is documented) and `response_schema_conformance`
(every body matches its documented schema, errors included). Requests carry the token, so the write
endpoints are exercised past authentication. A failure names the operation, the phase and a curl
command that reproduces it, and the seed (`SCHEMATHESIS_SEED` runs it again).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events

from tests.api.conftest import TOKEN, Fleet

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "30"))
CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance")


def _config() -> SchemathesisConfig:
    seed = os.environ.get("SCHEMATHESIS_SEED")
    return SchemathesisConfig.from_dict({
        **({"seed": int(seed)} if seed else {}),
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "workers": 1,  # one store, one thread: the answers depend on the requests alone
        "cache": {"enabled": False},  # no crash cache written into the checkout
        "generation": {"max-examples": EXAMPLES, "database": "none"},
        "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
    })  # fmt: skip


def _failures(event: events.ScenarioFinished) -> list[str]:
    out = []
    for nodes in event.recorder.checks.values():
        for node in nodes:
            if node.failure_info is not None:
                f = node.failure_info.failure
                where = f"{event.recorder.label} ({event.phase.value})"
                out.append(f"{where}: {f.title}: {str(f.message)[:300]}\n  {node.failure_info.code_sample}")
    return out


def test_answers_match_schema(fleet: Fleet) -> None:
    config = _config()
    schema = schemathesis.openapi.from_asgi("/openapi.json", fleet.svc.app, config=config)
    operations = {r.ok().label for r in schema.get_all_operations()}
    assert len(operations) >= 12
    tested: set[str] = set()
    failures: dict[str, None] = {}  # in the order found, each once
    errors: list[Any] = []
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            if event.recorder.cases:
                tested.add(event.recorder.label)
            failures.update(dict.fromkeys(_failures(event)))
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(event)
    assert not errors, errors
    assert operations <= tested, f"never tested: {sorted(operations - tested)}"
    if failures:
        pytest.fail(f"{len(failures)} failure(s), seed {config.seed}:\n" + "\n".join(failures))


def _operations(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{m.upper()} {p}", op) for p, item in spec["paths"].items() for m, op in item.items()]


def test_errors_are_documented(fleet: Fleet) -> None:
    spec = fleet.client.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's list; ours is one line
    problem = {"$ref": "#/components/schemas/Problem"}
    for name, op in _operations(spec):
        codes = op["responses"]
        for code, answer in codes.items():
            if code.startswith("4"):
                assert answer["content"]["application/json"]["schema"] == problem, (name, code)
        if op.get("parameters") or "requestBody" in op:
            assert "422" in codes, name
        if "requestBody" in op:
            assert {"400", "408", "413"} <= codes.keys(), name
        # the token's answers where a token is asked for, and only there
        assert ({"401", "403"} <= codes.keys()) == ("security" in op), name
    ops = dict(_operations(spec))
    for name in ("GET /v1/gpus/{uuid}", "GET /v1/gpus/{uuid}/risk", "GET /v1/gpus/{uuid}/probes",
                 "GET /v1/nodes/{hostname}", "POST /v1/decisions/{decision_id}/ack", "POST /v1/failures"):  # fmt: skip
        assert "404" in ops[name]["responses"], name
    assert ops["GET /readyz"]["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Health"
    }
