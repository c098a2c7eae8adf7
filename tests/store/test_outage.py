"""A database that goes away: clear StoreUnavailable errors, then recovery on the same Store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from store import Store, StoreUnavailable
from tests.postgres import PostgresServer
from tests.store.conftest import T0, frame

pytestmark = pytest.mark.integration


def test_postgres_restart(pg_template: PostgresServer) -> None:
    server = pg_template
    url = server.create_database("outage", template="gpuhealth_template")
    store = Store.open(url)
    try:
        assert store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_temp_c": 40.0}])) == 1
        server.stop()
        try:
            late = frame([{"timestamp": T0 + timedelta(seconds=10), "gpu_uuid": "GPU-a", "gpu_temp_c": 41.0}])
            for call in (store.ping, lambda: store.samples.ingest(late), store.gpus.find, store.counts):
                with pytest.raises(StoreUnavailable) as err:
                    call()
                assert str(err.value).startswith(f"cannot reach the database at {store.url}: ")
                assert "\n" not in str(err.value)
        finally:
            server.start()
        # the pooled connections died with the server; the same Store reconnects by itself
        store.ping()
        assert store.samples.ingest(late) == 1
        assert store.counts()["samples"] == 2
    finally:
        store.close()
        server.drop_database("outage")


def test_unreachable_server_fails_fast_with_masked_password() -> None:
    store = Store("postgresql+psycopg://gpuhealth:s3cret@127.0.0.1:1/gpuhealth")
    try:
        with pytest.raises(StoreUnavailable) as err:
            store.ping()
    finally:
        store.close()
    msg = str(err.value)
    assert (
        msg
        == "cannot reach the database at postgresql+psycopg://gpuhealth:***@127.0.0.1:1/gpuhealth: connection refused"
    )
    assert "s3cret" not in repr(store)
