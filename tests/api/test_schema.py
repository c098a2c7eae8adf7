"""Schemathesis against our own OpenAPI schema: generated requests never get a server error.

Requests carry the token, so the write endpoints are exercised past authentication too.
Every operation gets its own Hypothesis run, and a failure names the operation.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.api.conftest import Fleet, auth

EXAMPLES = int(__import__("os").environ.get("SCHEMATHESIS_EXAMPLES", "30"))


def test_no_server_errors(fleet: Fleet) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fleet.svc.app)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 12
    failures = []
    for op in operations:

        @given(case=op.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=auth(), checks=[checks.not_a_server_error])

        try:
            run()
        except Exception as err:  # collect all operations' failures, then report them together
            failures.append(f"{op.method.upper()} {op.path}: {str(err)[:800]}")
    if failures:
        pytest.fail("\n".join(failures))
