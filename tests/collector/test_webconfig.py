"""The web config file: parsing and its errors, basic auth and its cache, TLS on the real endpoint."""

from __future__ import annotations

import base64
import collections
import http.client
import itertools
import os
import socket
import ssl
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from typer.testing import CliRunner

import collector.webconfig as webconfig
from collector.exporter import ExporterServer
from collector.webconfig import BasicAuth, WebConfigError, WebConfigFile, load_web_config, parse_web_config
from gpuhealth.cli import app
from tests.collector.pki import Pki, bcrypt_hash, make_pki

PASSWORD = "s3cret"
REFUSED = (OSError, http.client.HTTPException)
"""What a client sees when the TLS handshake refuses it: an SSL error, a reset, or (TLS 1.3,
where the client finishes first) a connection closed before any answer. URLError is an OSError."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def hashed() -> str:
    return bcrypt_hash(PASSWORD)


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- parsing -----------------------------------------------------------------------------


def test_full_config_relative_paths_from_the_files_directory(tmp_path: Path, hashed: str) -> None:
    config = parse_web_config(
        textwrap.dedent(f"""
            tls_server_config:
              cert_file: server.crt
              key_file: /etc/keys/server.key
              client_auth_type: RequireAndVerifyClientCert
              client_ca_file: ca.crt
              client_allowed_sans: [scraper.example]
              min_version: TLS13
            http_server_config:
              http2: false
              headers:
                X-Frame-Options: deny
                Content-Security-Policy: ""
            basic_auth_users:
              prometheus: '{hashed}'
        """),
        tmp_path,
    )
    assert config.tls is not None
    assert config.tls.cert_file == tmp_path / "server.crt"
    assert config.tls.key_file == Path("/etc/keys/server.key")
    assert config.tls.client_ca_file == tmp_path / "ca.crt"
    assert (config.tls.client_auth_type, config.tls.min_version, config.tls.max_version) == (
        "RequireAndVerifyClientCert", "TLS13", "TLS13",
    )  # fmt: skip
    assert config.tls.client_allowed_sans == ("scraper.example",)
    assert config.users == {"prometheus": hashed.encode()}
    assert config.headers == (("X-Frame-Options", "deny"),), "a blank header is unset"
    assert config.http2 is False


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "basic_auth_users:\n", "tls_server_config: {}\n"])
def test_empty_config_is_open_plain_http(tmp_path: Path, text: str) -> None:
    config = parse_web_config(text, tmp_path)
    assert (config.tls, dict(config.users), config.headers) == (None, {}, ())


BAD_CONFIGS = {
    "typo": ("tls_server_config:\n  cert_fil: a\n  key_file: b\n", "tls_server_config: unknown key 'cert_fil'"),
    "unknown top key": ("basic_auth_user: {}\n", "the file: unknown key 'basic_auth_user'"),
    "no key_file": ("tls_server_config:\n  cert_file: a\n", "needs both cert_file and key_file"),
    "only min_version": ("tls_server_config:\n  min_version: TLS13\n", "needs both cert_file and key_file"),
    "bad version": ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS1.3}\n", "min_version must be"),
    "min above max": (
        "tls_server_config: {cert_file: a, key_file: b, min_version: TLS13, max_version: TLS12}\n",
        "min_version TLS13 is above max_version TLS12",
    ),
    "unknown client auth": (
        "tls_server_config: {cert_file: a, key_file: b, client_auth_type: Maybe}\n",
        "client_auth_type must be one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert",
    ),
    "unverified client auth": (
        "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert, client_ca_file: c}\n",
        "RequireAnyClientCert is not supported",
    ),
    "verify without CA": (
        "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}\n",
        "RequireAndVerifyClientCert needs client_ca_file",
    ),
    "CA without verify": (
        "tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n",
        "client_ca_file is set but client_auth_type is NoClientCert",
    ),
    "SANs without required cert": (
        "tls_server_config: {cert_file: a, key_file: b, client_auth_type: VerifyClientCertIfGiven,"
        " client_ca_file: c, client_allowed_sans: [x]}\n",
        "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert",
    ),
    "inline cert": ("tls_server_config: {cert: '-----BEGIN', key_file: b}\n", "cert: inline PEM is not supported"),
    "cipher suites": (
        "tls_server_config: {cert_file: a, key_file: b, cipher_suites: [TLS_AES_128_GCM_SHA256]}\n",
        "cipher_suites: not supported",
    ),
    "rate limit": ("rate_limit: {interval: 1s, burst: 5}\n", "rate_limit: not supported"),
    "plaintext password": ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice is not a bcrypt hash"),
    "cost too low": (
        "basic_auth_users:\n  alice: $2y$03$fZPlRQ4CRkjyubha9O/KW.5GFsI/1AjCfqNLF1o89qlRsjfprSpNe\n",
        "bcrypt cost 03 is outside 4..31",
    ),
    "numeric password": ("basic_auth_users:\n  alice: 1234\n", "basic_auth_users.alice must be a string"),
    "users as list": ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping, not list"),
    "duplicate user": (
        "basic_auth_users:\n  alice: $2y$10$fZPlRQ4CRkjyubha9O/KW.5GFsI/1AjCfqNLF1o89qlRsjfprSpNe\n"
        "  alice: $2y$10$fZPlRQ4CRkjyubha9O/KW.5GFsI/1AjCfqNLF1o89qlRsjfprSpNe\n",
        "duplicate key 'alice' (line 3)",
    ),
    "header not allowed": ("http_server_config:\n  headers: {Server: x}\n", "'Server' cannot be set"),
    "header value": (
        "http_server_config:\n  headers: {X-Frame-Options: allow}\n",
        "X-Frame-Options must be one of deny, sameorigin",
    ),
    "http2 not bool": ("http_server_config: {http2: 'yes'}\n", "http_server_config.http2 must be true or false"),
    "not YAML": ("tls_server_config: [\n", "not valid YAML"),
    "list as a version": (
        "tls_server_config: {cert_file: a, key_file: b, min_version: [TLS13]}\n",
        "min_version must be one of TLS10, TLS11, TLS12, TLS13, not ['TLS13']",
    ),
    "unhashable key": ("? [a, b]\n: c\n", "not valid YAML: while constructing a mapping"),
    "not a mapping": ("- a\n- b\n", "the file must be a mapping, not list"),
}


@pytest.mark.parametrize(("text", "message"), BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_malformed_config_is_one_clear_error_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "web.yml", text)
    with pytest.raises(WebConfigError) as info:
        load_web_config(path)
    assert message in str(info.value)
    assert str(info.value).startswith(f"web config {path}: ")
    assert "\n" not in str(info.value)


def test_unreadable_certificates_are_startup_errors(tmp_path: Path, pki: Pki) -> None:
    def loads(cert: Path, key: Path) -> str:
        web = _write(tmp_path / "web.yml", f"tls_server_config: {{cert_file: '{cert}', key_file: '{key}'}}\n")
        with pytest.raises(WebConfigError) as info:
            WebConfigFile(web)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert f"cannot read {tmp_path / 'missing.crt'}: no such file" in loads(tmp_path / "missing.crt", pki.server.key)
    assert "are not a PEM certificate and its key" in loads(pki.server.cert, pki.client.key), "key of another cert"
    assert "are not a PEM certificate and its key" in loads(pki.ca, pki.ca), "a certificate is not a key"
    assert "are not a PEM certificate and its key" in loads(tmp_path, pki.server.key), "a directory"
    encrypted = tmp_path / "encrypted.key"
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    assert "the private key is encrypted" in loads(pki.server.cert, encrypted)
    with pytest.raises(WebConfigError, match="cannot read it: No such file"):
        WebConfigFile(tmp_path / "nope.yml")


def test_cli_prints_one_error_line_and_exits_non_zero(tmp_path: Path) -> None:
    web = _write(tmp_path / "web.yml", "tls_server_config:\n  cert_fil: a\n")
    result = CliRunner().invoke(app, ["collect", "--backend", "sim", "--web-config-file", str(web)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: web config"), result.output
    assert "unknown key 'cert_fil'" in result.output


# --- basic auth --------------------------------------------------------------------------


class CountingBcrypt:
    """Counts bcrypt.checkpw calls (the expensive part) while still running them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            self.calls += 1
            return real(password, hashed)

        monkeypatch.setattr(webconfig.bcrypt, "checkpw", checkpw)


def test_basic_auth_accepts_only_the_right_password(hashed: str) -> None:
    users = {"prometheus": hashed.encode()}
    auth = BasicAuth()
    assert auth.check(users, _basic("prometheus", PASSWORD))
    assert auth.check(users, "basic " + _basic("prometheus", PASSWORD)[6:]), "the scheme is case-insensitive"
    assert not auth.check(users, _basic("prometheus", PASSWORD + "x"))
    assert not auth.check(users, _basic("grafana", PASSWORD))
    assert not auth.check(users, None)
    assert not auth.check(users, "Bearer abc")
    assert not auth.check(users, "Basic !!!not-base64")
    assert not auth.check(users, "Basic " + base64.b64encode(b"no-colon").decode())
    assert not auth.check(users, "Basic " + base64.b64encode(b"\xff:x").decode())
    assert not auth.check({}, _basic("prometheus", PASSWORD))


def test_verified_credentials_are_cached(monkeypatch: pytest.MonkeyPatch, hashed: str) -> None:
    users = {"prometheus": hashed.encode()}
    auth, counter = BasicAuth(), CountingBcrypt(monkeypatch)
    for _ in range(5):
        assert auth.check(users, _basic("prometheus", PASSWORD))
    assert counter.calls == 1, "a scrape does not pay bcrypt once the password is known"
    for _ in range(3):
        assert not auth.check(users, _basic("prometheus", "wrong"))
    assert counter.calls == 2, "a repeated wrong password is cached as wrong"
    new_hash = bcrypt_hash("rotated").encode()
    assert not auth.check({"prometheus": new_hash}, _basic("prometheus", PASSWORD)), "a new hash is a new check"
    assert counter.calls == 3
    for i in range(BasicAuth.FAILURE_CACHE_SIZE + 10):
        auth.check(users, _basic("prometheus", f"guess{i}"))
    assert len(auth._failed) == BasicAuth.FAILURE_CACHE_SIZE, "the cache is bounded"
    for i in range(BasicAuth.CACHE_SIZE + 10):
        assert auth.check({f"u{i}": hashed.encode()}, _basic(f"u{i}", PASSWORD))
    assert len(auth._ok) == BasicAuth.CACHE_SIZE, "so is the cache of successes"
    assert all(len(k) == 32 for k in [*auth._ok, *auth._failed]), "the cache keys are HMAC digests, not passwords"


def test_unknown_user_pays_bcrypt_at_the_users_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []
    real = bcrypt.checkpw
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda p, h: seen.append(h) or real(p, h))
    users = {"prometheus": bcrypt_hash(PASSWORD, cost=5).encode()}
    assert not BasicAuth().check(users, _basic("intruder", PASSWORD))
    assert len(seen) == 1 and seen[0].startswith(b"$2y$05$"), "no timing difference between unknown and wrong"


def test_passwords_beyond_72_bytes_are_truncated_like_htpasswd() -> None:
    long = "p" * 72
    users = {"u": bcrypt_hash(long).encode()}
    assert BasicAuth().check(users, _basic("u", long + "ignored by bcrypt"))


# --- the endpoint ------------------------------------------------------------------------


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[ExporterServer] = []

    def start(web: Path | None) -> ExporterServer:
        srv = ExporterServer(_FakeRegistry(), lambda: (True, "ok"), "127.0.0.1", 0, WebConfigFile(web) if web else None)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


class _FakeRegistry:
    def collect(self) -> list[object]:
        from prometheus_client.core import GaugeMetricFamily

        return [GaugeMetricFamily("gpuhealth_gpus", "GPUs visible and answering.", value=2)]


def _get(
    url: str, authorization: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def _client(pki: Pki, cert: bool = True, **kw: object) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(pki.client.cert, pki.client.key)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def test_basic_auth_guards_every_path_with_401(tmp_path: Path, hashed: str, serve) -> None:
    web = _write(
        tmp_path / "web.yml",
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers: {X-Content-Type-Options: nosniff}\n",
    )
    srv = serve(web)
    assert srv.scheme == "http"
    base = f"http://127.0.0.1:{srv.port}"
    for path in ("/metrics", "/healthz", "/", "/nope"):
        code, headers, body = _get(base + path)
        assert (code, body) == (401, "Unauthorized\n"), path
        assert headers["WWW-Authenticate"].startswith("Basic "), headers
        assert headers["X-Content-Type-Options"] == "nosniff", "configured headers go on refusals too"
        assert _get(base + path, _basic("prometheus", "wrong"))[0] == 401
    code, headers, body = _get(base + "/metrics", _basic("prometheus", PASSWORD))
    assert code == 200 and "gpuhealth_gpus 2.0" in body
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert _get(base + "/healthz", _basic("prometheus", PASSWORD))[::2] == (200, "ok\n")


def test_without_web_config_nothing_changes(serve) -> None:
    srv = serve(None)
    code, headers, body = _get(f"http://127.0.0.1:{srv.port}/metrics")
    assert code == 200 and "WWW-Authenticate" not in headers and "gpuhealth_gpus 2.0" in body


def test_tls_serves_the_certificate_and_refuses_unverified_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = _write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
    )
    srv = serve(web)
    assert srv.scheme == "https"
    url = f"https://127.0.0.1:{srv.port}/metrics"
    code, _, body = _get(url, context=_client(pki, cert=False))
    assert code == 200 and "gpuhealth_gpus 2.0" in body
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(url, context=ssl.create_default_context())  # the system CAs do not know ours
    with pytest.raises((OSError, http.client.HTTPException)):  # URLError is an OSError
        _get(f"http://127.0.0.1:{srv.port}/metrics")  # plain HTTP on the TLS port


def test_client_certificates_are_required_and_verified(tmp_path: Path, pki: Pki, hashed: str, serve) -> None:
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki.server.cert}
          key_file: {pki.server.key}
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki.ca}
          client_allowed_sans: [scraper.example]
        basic_auth_users:
          prometheus: '{hashed}'
        """,
    )
    srv = serve(web)
    url = f"https://127.0.0.1:{srv.port}/metrics"
    assert _get(url, _basic("prometheus", PASSWORD), _client(pki))[0] == 200
    assert _get(url, None, _client(pki))[0] == 401, "a client certificate does not replace the password"
    for refused in (_client(pki, cert=False), _stranger(pki)):
        with pytest.raises(REFUSED):
            _get(url, _basic("prometheus", PASSWORD), refused)


def _stranger(pki: Pki) -> ssl.SSLContext:
    ctx = _client(pki, cert=False)
    ctx.load_cert_chain(pki.stranger.cert, pki.stranger.key)
    return ctx


def test_client_allowed_sans_refuse_other_names(tmp_path: Path, pki: Pki, serve) -> None:
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki.server.cert}
          key_file: {pki.server.key}
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki.ca}
          client_allowed_sans: [other.example, "::1"]
        """,
    )
    srv = serve(web)
    with pytest.raises(REFUSED):
        _get(f"https://127.0.0.1:{srv.port}/metrics", context=_client(pki))


def test_min_version_refuses_older_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n  min_version: TLS13\n",
    )
    srv = serve(web)
    url = f"https://127.0.0.1:{srv.port}/metrics"
    assert _get(url, context=_client(pki, cert=False))[0] == 200
    with pytest.raises(REFUSED):
        _get(url, context=_client(pki, cert=False, maximum_version=ssl.TLSVersion.TLSv1_2))


def test_a_stalled_handshake_does_not_block_other_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = _write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
    )
    srv = serve(web)
    with socket.create_connection(("127.0.0.1", srv.port)):  # connects, never says hello
        started = time.monotonic()
        assert _get(f"https://127.0.0.1:{srv.port}/healthz", context=_client(pki, cert=False))[0] == 200
        assert time.monotonic() - started < 2.0


def test_rotated_certificates_and_users_apply_without_restart(tmp_path: Path, pki: Pki, serve) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("server.crt", "server.key"):
        (certs / name).write_bytes((pki.server.cert.parent / name).read_bytes())
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config:\n  cert_file: certs/server.crt\n  key_file: certs/server.key\n"
        f"basic_auth_users:\n  prometheus: '{bcrypt_hash('old')}'\n",
    )
    srv = serve(web)
    url = f"https://127.0.0.1:{srv.port}/metrics"
    assert _get(url, _basic("prometheus", "old"), _client(pki, cert=False))[0] == 200

    fresh = make_pki(tmp_path / "fresh")
    for name in ("server.crt", "server.key"):
        _replace(certs / name, (fresh.server.cert.parent / name).read_bytes())
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(url, _basic("prometheus", "old"), _client(pki, cert=False))
    assert _get(url, _basic("prometheus", "old"), _client(fresh, cert=False))[0] == 200, "the new cert is served"

    _replace(web, web.read_bytes().replace(b"prometheus:", b"grafana:"))
    assert _get(url, _basic("prometheus", "old"), _client(fresh, cert=False))[0] == 401, "a removed user is out"
    assert _get(url, _basic("grafana", "old"), _client(fresh, cert=False))[0] == 200


def test_a_broken_edit_fails_closed_until_fixed(tmp_path: Path, hashed: str, serve) -> None:
    good = f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    web = _write(tmp_path / "web.yml", good)
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    assert _get(url, _basic("prometheus", PASSWORD))[0] == 200
    _replace(web, b"basic_auth_users:\n  prometheus: hunter2\n")
    code, _, body = _get(url, _basic("prometheus", PASSWORD))
    assert code == 500 and "web config" in body, "not the old, maybe laxer, config"
    _replace(web, b"{}\n")
    assert _get(url)[0] == 200, "fixed (here: opened) without a restart"


def _replace(path: Path, data: bytes) -> None:
    """Rewrite `path` so that a stat sees the change even within one mtime tick (a new inode)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_concurrent_scrapes_with_auth(tmp_path: Path, hashed: str, serve) -> None:
    web = _write(tmp_path / "web.yml", f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda: codes.append(_get(url, _basic("prometheus", PASSWORD))[0])) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 8


def test_wrong_passwords_never_evict_a_verified_one(monkeypatch: pytest.MonkeyPatch, hashed: str) -> None:
    """64 clients of wrong passwords filled the one cache of both outcomes: the valid scrape paid bcrypt again."""
    users = {"prometheus": hashed.encode()}
    auth, counter = BasicAuth(), CountingBcrypt(monkeypatch)
    assert auth.check(users, _basic("prometheus", PASSWORD))
    for i in range(3 * BasicAuth.CACHE_SIZE):
        assert not auth.check(users, _basic("prometheus", f"guess{i}"))
    calls = counter.calls
    assert auth.check(users, _basic("prometheus", PASSWORD))
    assert counter.calls == calls, "the verified password is still known: no bcrypt for it"


def test_waiting_for_bcrypt_is_bounded_and_known_passwords_never_wait(
    monkeypatch: pytest.MonkeyPatch, hashed: str
) -> None:
    users = {"prometheus": hashed.encode()}
    auth = BasicAuth()
    assert auth.check(users, _basic("prometheus", PASSWORD))
    running, release = threading.Event(), threading.Event()
    real = bcrypt.checkpw

    def stuck(password: bytes, h: bytes) -> bool:  # a hash that takes as long as the test says
        running.set()
        release.wait(10)
        return real(password, h)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", stuck)
    monkeypatch.setattr(BasicAuth, "HASH_WAIT_S", 1.0)
    outcomes: list[object] = []

    def attempt(password: str) -> None:
        try:
            outcomes.append(auth.check(users, _basic("prometheus", password), "10.0.0.9"))
        except webconfig.AuthBusy as err:
            outcomes.append(err)

    flood = [threading.Thread(target=attempt, args=(f"guess-{i}",)) for i in range(2)]
    flood[0].start()
    assert running.wait(5)
    flood[1].start()
    deadline = time.monotonic() + 5
    while auth._queued.get("10.0.0.9") != 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the second guess is in the queue
    started = time.monotonic()
    with pytest.raises(webconfig.AuthBusy, match="2 password checks of this client already wait"):
        auth.check(users, _basic("prometheus", "guess-3"), "10.0.0.9")
    assert auth.check(users, _basic("prometheus", PASSWORD), "10.0.0.1"), "known: answered from the cache"
    assert time.monotonic() - started < 0.5, "neither waited for the stuck hash"
    with pytest.raises(webconfig.AuthBusy, match=r"bcrypt was not free within 1s"):
        auth.check(users, _basic("prometheus", "new"), "10.0.0.1")
    assert time.monotonic() - started < 3.0, "a new password waits HASH_WAIT_S, not for the hash to end"
    release.set()
    for t in flood:
        t.join(10)
    assert sorted(type(o).__name__ for o in outcomes) == ["AuthBusy", "bool"], outcomes
    assert auth.check(users, _basic("prometheus", "guess-0"), "10.0.0.9") is False, "refusals are cached"
    assert auth.check(users, _basic("prometheus", "guess-1"), "10.0.0.9") is False, "the queue is free again"


def _timed_get(url: str, authorization: str) -> tuple[int | None, float]:
    started = time.monotonic()
    try:
        code = _get(url, authorization)[0]
    except REFUSED:  # a timeout (5 s) counts as no answer
        code = None
    return code, time.monotonic() - started


def test_a_flood_of_wrong_passwords_leaves_scrapes_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve
) -> None:
    """Before: 64 clients of wrong passwords made a valid scrape take 7.8 s, 9.1 s, then time out at 10 s."""
    # Small caches turn over within the first second of the flood, as 100 entries do within 10 s.
    monkeypatch.setattr(BasicAuth, "CACHE_SIZE", 4)
    monkeypatch.setattr(BasicAuth, "FAILURE_CACHE_SIZE", 4, raising=False)
    production = 10  # htpasswd -nBC 10: about 0.1 s a check, so the flood queues for the hash
    web = _write(
        tmp_path / "web.yml",
        f"basic_auth_users:\n  prometheus: '{bcrypt_hash(PASSWORD, production)}'\n"
        f"  grafana: '{bcrypt_hash('other', production)}'\n",
    )
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    assert _get(url, _basic("prometheus", PASSWORD))[0] == 200  # verified once: known from here on
    stop = threading.Event()
    refused: list[int | None] = []

    def flood(n: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            refused.append(_timed_get(url, _basic("prometheus", f"guess-{n}-{i}"))[0])

    threads = [threading.Thread(target=flood, args=(n,), daemon=True) for n in range(32)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        known = []
        for _ in range(3):
            known.append(_timed_get(url, _basic("prometheus", PASSWORD)))
            time.sleep(0.3)
        new = _from_another_address(srv.port, _basic("grafana", "other"))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert [code for code, _ in known] == [200] * 3, known
    assert max(s for _, s in known) < 3.0, known
    # Not known yet (a new scraper, or any after a restart): the flooding client holds two places
    # in the queue for bcrypt, so another client's password is checked within a few hashes.
    assert new[0] == 200 and new[1] < 3.0, new
    # The flood itself is answered, not queued: 401 for each guess checked, 503 for the rest.
    assert set(refused) == {401, 503}, collections.Counter(refused)


def _from_another_address(port: int, authorization: str) -> tuple[int | None, float]:
    """GET /metrics from 127.0.0.2 (Linux answers all of 127/8 on loopback), timed."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=("127.0.0.2", 0))
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization})
        code: int | None = conn.getresponse().status
    except REFUSED:
        code = None
    finally:
        conn.close()
    return code, time.monotonic() - started
