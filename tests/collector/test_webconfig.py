"""The web config file: parsing and its errors, TLS and basic auth on the real endpoint (the auth: test_basicauth)."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collector.webconfig import WebConfigError, WebConfigFile, load_web_config, parse_web_config
from gpuhealth.cli import app
from tests.collector.pki import Pki, bcrypt_hash, make_pki
from tests.collector.web import PASSWORD, REFUSED, basic, get, write


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


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
    path = write(tmp_path / "web.yml", text)
    with pytest.raises(WebConfigError) as info:
        load_web_config(path)
    assert message in str(info.value)
    assert str(info.value).startswith(f"web config {path}: ")
    assert "\n" not in str(info.value)


def test_unreadable_certificates_are_startup_errors(tmp_path: Path, pki: Pki) -> None:
    def loads(cert: Path, key: Path) -> str:
        web = write(tmp_path / "web.yml", f"tls_server_config: {{cert_file: '{cert}', key_file: '{key}'}}\n")
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
    web = write(tmp_path / "web.yml", "tls_server_config:\n  cert_fil: a\n")
    result = CliRunner().invoke(app, ["collect", "--backend", "sim", "--web-config-file", str(web)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: web config"), result.output
    assert "unknown key 'cert_fil'" in result.output


# --- the endpoint ------------------------------------------------------------------------


def _client(pki: Pki, cert: bool = True, **kw: object) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(pki.client.cert, pki.client.key)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def test_basic_auth_guards_every_path_with_401(tmp_path: Path, hashed: str, serve) -> None:
    web = write(
        tmp_path / "web.yml",
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers: {X-Content-Type-Options: nosniff}\n",
    )
    srv = serve(web)
    assert srv.scheme == "http"
    base = f"http://127.0.0.1:{srv.port}"
    for path in ("/metrics", "/healthz", "/", "/nope"):
        code, headers, body = get(base + path)
        assert (code, body) == (401, "Unauthorized\n"), path
        assert headers["WWW-Authenticate"].startswith("Basic "), headers
        assert headers["X-Content-Type-Options"] == "nosniff", "configured headers go on refusals too"
        assert get(base + path, basic("prometheus", "wrong"))[0] == 401
    code, headers, body = get(base + "/metrics", basic("prometheus", PASSWORD))
    assert code == 200 and "gpuhealth_gpus 2.0" in body
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert get(base + "/healthz", basic("prometheus", PASSWORD))[::2] == (200, "ok\n")


def test_without_web_config_nothing_changes(serve) -> None:
    srv = serve(None)
    code, headers, body = get(f"http://127.0.0.1:{srv.port}/metrics")
    assert code == 200 and "WWW-Authenticate" not in headers and "gpuhealth_gpus 2.0" in body


def test_tls_serves_the_certificate_and_refuses_unverified_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
    )
    srv = serve(web)
    assert srv.scheme == "https"
    url = f"https://127.0.0.1:{srv.port}/metrics"
    code, _, body = get(url, context=_client(pki, cert=False))
    assert code == 200 and "gpuhealth_gpus 2.0" in body
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(url, context=ssl.create_default_context())  # the system CAs do not know ours
    with pytest.raises((OSError, http.client.HTTPException)):  # URLError is an OSError
        get(f"http://127.0.0.1:{srv.port}/metrics")  # plain HTTP on the TLS port


def test_client_certificates_are_required_and_verified(tmp_path: Path, pki: Pki, hashed: str, serve) -> None:
    web = write(
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
    assert get(url, basic("prometheus", PASSWORD), _client(pki))[0] == 200
    assert get(url, None, _client(pki))[0] == 401, "a client certificate does not replace the password"
    for refused in (_client(pki, cert=False), _stranger(pki)):
        with pytest.raises(REFUSED):
            get(url, basic("prometheus", PASSWORD), refused)


def _stranger(pki: Pki) -> ssl.SSLContext:
    ctx = _client(pki, cert=False)
    ctx.load_cert_chain(pki.stranger.cert, pki.stranger.key)
    return ctx


def test_client_allowed_sans_refuse_other_names(tmp_path: Path, pki: Pki, serve) -> None:
    web = write(
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
        get(f"https://127.0.0.1:{srv.port}/metrics", context=_client(pki))


def test_min_version_refuses_older_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = write(
        tmp_path / "web.yml",
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n  min_version: TLS13\n",
    )
    srv = serve(web)
    url = f"https://127.0.0.1:{srv.port}/metrics"
    assert get(url, context=_client(pki, cert=False))[0] == 200
    with pytest.raises(REFUSED):
        get(url, context=_client(pki, cert=False, maximum_version=ssl.TLSVersion.TLSv1_2))


def test_a_stalled_handshake_does_not_block_other_clients(tmp_path: Path, pki: Pki, serve) -> None:
    web = write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
    )
    srv = serve(web)
    with socket.create_connection(("127.0.0.1", srv.port)):  # connects, never says hello
        started = time.monotonic()
        assert get(f"https://127.0.0.1:{srv.port}/healthz", context=_client(pki, cert=False))[0] == 200
        assert time.monotonic() - started < 2.0


def test_rotated_certificates_and_users_apply_without_restart(tmp_path: Path, pki: Pki, serve) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("server.crt", "server.key"):
        (certs / name).write_bytes((pki.server.cert.parent / name).read_bytes())
    web = write(
        tmp_path / "web.yml",
        f"tls_server_config:\n  cert_file: certs/server.crt\n  key_file: certs/server.key\n"
        f"basic_auth_users:\n  prometheus: '{bcrypt_hash('old')}'\n",
    )
    srv = serve(web)
    url = f"https://127.0.0.1:{srv.port}/metrics"
    assert get(url, basic("prometheus", "old"), _client(pki, cert=False))[0] == 200

    fresh = make_pki(tmp_path / "fresh")
    for name in ("server.crt", "server.key"):
        _replace(certs / name, (fresh.server.cert.parent / name).read_bytes())
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(url, basic("prometheus", "old"), _client(pki, cert=False))
    assert get(url, basic("prometheus", "old"), _client(fresh, cert=False))[0] == 200, "the new cert is served"

    _replace(web, web.read_bytes().replace(b"prometheus:", b"grafana:"))
    assert get(url, basic("prometheus", "old"), _client(fresh, cert=False))[0] == 401, "a removed user is out"
    assert get(url, basic("grafana", "old"), _client(fresh, cert=False))[0] == 200


def test_a_broken_edit_fails_closed_until_fixed(tmp_path: Path, hashed: str, serve) -> None:
    good = f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    web = write(tmp_path / "web.yml", good)
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    assert get(url, basic("prometheus", PASSWORD))[0] == 200
    _replace(web, b"basic_auth_users:\n  prometheus: hunter2\n")
    code, _, body = get(url, basic("prometheus", PASSWORD))
    assert code == 500 and "web config" in body, "not the old, maybe laxer, config"
    _replace(web, b"{}\n")
    assert get(url)[0] == 200, "fixed (here: opened) without a restart"


def _replace(path: Path, data: bytes) -> None:
    """Rewrite `path` so that a stat sees the change even within one mtime tick (a new inode)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
