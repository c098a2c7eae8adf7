"""A real Prometheus scrapes `gpuhealth collect --web-config-file` over TLS, with a client certificate and basic auth.

The web config is the exporter-toolkit file node_exporter and dcgm-exporter read, and the
scrape configs are the ones an operator writes for them (`scheme: https`, `tls_config`,
`basic_auth`): what this proves is that Go's TLS stack and Prometheus's client accept ours.
One Prometheus scrapes the same exporter as three jobs: with the right credentials, with a
wrong password and without a client certificate; only the first may be up.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.collector.pki import bcrypt_hash, make_pki
from tests.integration.conftest import (
    PromClient,
    Service,
    http_get,
    poll,
    require_tool,
    start_exporter,
    start_prometheus,
)

if TYPE_CHECKING:
    from tests.integration.conftest import SimNode

pytestmark = pytest.mark.integration

SCRAPE_DEADLINE_S = 30.0
USER = "prometheus"
PASSWORD = "correct horse battery staple"
GOOD, WRONG_PASSWORD, NO_CLIENT_CERT = "gpu_tls", "gpu_tls_wrong_password", "gpu_tls_no_client_cert"


@dataclass(frozen=True)
class TlsStack:
    """The exporter behind TLS and the Prometheus scraping it (both attach their logs to a failure)."""

    exporter: Service
    prometheus: Service
    web_config: Path

    @property
    def prom(self) -> PromClient:
        return PromClient(self.prometheus.url)

    @property
    def target(self) -> str:
        return self.exporter.url.removeprefix("https://")

    def services(self) -> list[Service]:
        return [self.exporter, self.prometheus]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsStack]:
    """`gpuhealth collect` with TLS, RequireAndVerifyClientCert and basic auth; Prometheus scraping it three ways."""
    require_tool("prometheus")  # before making certificates and starting the exporter for nothing
    workdir = tmp_path_factory.mktemp("collector-tls")
    pki = make_pki(workdir / "pki")
    web = workdir / "pki" / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki.server.cert.name}\n"  # relative to web.yml's folder, as exporter-toolkit reads it
        f"  key_file: {pki.server.key.name}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki.ca.name}\n"
        "basic_auth_users:\n"
        f"  {USER}: '{bcrypt_hash(PASSWORD)}'\n"
    )
    client = ssl.create_default_context(cafile=pki.ca)
    client.load_cert_chain(pki.client.cert, pki.client.key)
    auth = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
    # The readiness check GETs /healthz with the client certificate and the password: every path is guarded.
    exporter = start_exporter(workdir, "--web-config-file", str(web), context=client, headers=auth)
    target = exporter.url.removeprefix("https://")
    tls = {"ca_file": str(pki.ca), "cert_file": str(pki.client.cert), "key_file": str(pki.client.key)}
    scrape = {
        GOOD: {"scheme": "https", "tls_config": tls, "basic_auth": {"username": USER, "password": PASSWORD}},
        WRONG_PASSWORD: {"scheme": "https", "tls_config": tls, "basic_auth": {"username": USER, "password": "nope"}},
        NO_CLIENT_CERT: {
            "scheme": "https",
            "tls_config": {"ca_file": str(pki.ca)},
            "basic_auth": {"username": USER, "password": PASSWORD},
        },
    }
    try:
        prometheus = start_prometheus(workdir / "prometheus", {job: [target] for job in scrape}, scrape=scrape)
    except BaseException:
        exporter.stop()
        raise
    yield TlsStack(exporter, prometheus, web)
    try:
        exporter.assert_alive()
        prometheus.assert_alive()
    finally:
        prometheus.stop()
        exporter.stop()


def _targets(stack: TlsStack) -> dict[str, dict[str, object]]:
    """Prometheus's view of each job's single target, once every job has been scraped at least once."""

    def probe() -> dict[str, dict[str, object]]:
        active = stack.prom.api("/api/v1/targets")["activeTargets"]
        return {t["labels"]["job"]: t for t in active}

    return poll(
        "every job scraped once",
        probe,
        lambda ts: len(ts) == 3 and all(t["health"] != "unknown" for t in ts.values()),
        SCRAPE_DEADLINE_S,
    )


def test_scraped_over_tls_with_client_cert_and_basic_auth(stack: TlsStack, sim_node: SimNode) -> None:
    prom = stack.prom
    temps = prom.wait_for(f'DCGM_FI_DEV_GPU_TEMP{{job="{GOOD}"}}', lambda r: len(r) == sim_node.gpus, SCRAPE_DEADLINE_S)
    values = [float(r["value"][1]) for r in temps]
    assert all(10.0 <= v <= 100.0 for v in values), f"not a real temperature: {values}"
    assert {r["metric"]["Hostname"] for r in temps} == {sim_node.hostname}
    assert prom.query(f'gpuhealth_gpus{{job="{GOOD}"}}')[0]["value"][1] == str(sim_node.gpus)

    up = prom.query(f'up{{job="{GOOD}"}}')
    assert [(r["metric"]["instance"], r["value"][1]) for r in up] == [(stack.target, "1")]
    good = _targets(stack)[GOOD]
    assert good["health"] == "up" and good["lastError"] == "", good
    assert str(good["scrapeUrl"]).startswith("https://"), good["scrapeUrl"]


def test_wrong_password_takes_the_target_down(stack: TlsStack) -> None:
    target = _targets(stack)[WRONG_PASSWORD]
    assert target["health"] == "down", target
    assert "401" in str(target["lastError"]), target["lastError"]
    assert [r["value"][1] for r in stack.prom.query(f'up{{job="{WRONG_PASSWORD}"}}')] == ["0"]
    assert stack.prom.query(f'DCGM_FI_DEV_GPU_TEMP{{job="{WRONG_PASSWORD}"}}') == []


def test_missing_client_certificate_takes_the_target_down(stack: TlsStack) -> None:
    target = _targets(stack)[NO_CLIENT_CERT]
    assert target["health"] == "down", target
    # TLS 1.3: the client's side of the handshake is done before the server checks its certificate,
    # so Prometheus learns of the refusal on its first write or read: the server's alert ("tls:
    # certificate required") or, when the server closed the socket first, a reset (seen once in CI).
    error = str(target["lastError"]).lower()
    assert any(s in error for s in ("tls", "certificate", "connection reset by peer")), target
    assert [r["value"][1] for r in stack.prom.query(f'up{{job="{NO_CLIENT_CERT}"}}')] == ["0"]


def test_the_endpoint_refuses_plain_http(stack: TlsStack) -> None:
    # The handshake fails on the request line and the connection closes: no HTTP answer at all.
    with pytest.raises((OSError, http.client.HTTPException)):
        http_get(f"http://{stack.target}/metrics", timeout=5.0)


def test_promtool_reads_the_same_web_config(stack: TlsStack) -> None:
    """The file the collector served from is valid for exporter-toolkit too (`promtool check web-config`)."""
    promtool = require_tool("promtool")
    done = subprocess.run([promtool, "check", "web-config", str(stack.web_config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
