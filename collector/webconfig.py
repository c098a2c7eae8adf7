"""The exporter-toolkit web config file (`--web-config-file`): TLS, client certificates, basic auth, headers.

The YAML is the one node_exporter and dcgm-exporter read (`--web.config.file`, `--web-config-file`;
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md), so one file
serves a fleet's exporters. As in exporter-toolkit, relative paths are relative to the file, unknown
keys are errors, and the file (and every certificate it names) is re-read when it changes, so rotated
certificates apply to the next connection without a restart; an edit that does not load fails closed:
the endpoint refuses requests until it is fixed, rather than serve an older, maybe laxer, config.
Parts of the format that Python's ssl module cannot express are rejected by name, never ignored.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import os
import re
import secrets
import ssl
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

log = logging.getLogger(__name__)


class WebConfigError(ValueError):
    """The web config file (or a file it names) cannot be used; the message is one line."""


TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
"""exporter-toolkit's client_auth_type values (Go's tls.ClientAuthType) that ssl can express."""
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
"""Go accepts these without checking the certificate; Python's ssl always verifies what it asks for."""
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
"""exporter-toolkit's extraHTTPHeaders: the only headers it lets a config set, and their allowed values."""

_TLS_KEYS = {
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "client_allowed_sans",
    "min_version", "max_version", "prefer_server_cipher_suites",
}  # fmt: skip
_UNSUPPORTED = {
    "tls_server_config": {
        "cert": "inline PEM is not supported: put it in a file and use cert_file",
        "key": "inline PEM is not supported: put it in a file and use key_file",
        "client_ca": "inline PEM is not supported: put it in a file and use client_ca_file",
        "cipher_suites": "not supported (Go's cipher names); OpenSSL's default suites apply",
        "curve_preferences": "not supported; OpenSSL's default curves apply",
    },
    "the file": {"rate_limit": "not supported by gpuhealth collect"},
}
"""exporter-toolkit keys that Python's ssl (or this collector) cannot honour: an error, never ignored."""
_BCRYPT = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}")
_HTPASSWD = "generate one with: htpasswd -nBC 10 '' | tr -d ':\\n'"


@dataclass(frozen=True)
class TlsServerConfig:
    """`tls_server_config`, with paths made absolute."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    prefer_server_cipher_suites: bool = True

    def files(self) -> tuple[Path, ...]:
        """The files this config reads, so a change to any of them reloads it."""
        return (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())


@dataclass(frozen=True)
class WebConfig:
    """A parsed web config file: no TLS and no users means plain HTTP, open as without the flag."""

    tls: TlsServerConfig | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)
    """User name -> bcrypt hash."""
    headers: tuple[tuple[str, str], ...] = ()
    http2: bool = True
    """Accepted for compatibility; the collector always speaks HTTP/1.x (ALPN offers only http/1.1)."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, as Go's yaml.UnmarshalStrict does (a second user entry
    silently replacing the first is a mistake worth a startup error)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own error ("found unhashable key") follows
            if key in seen:
                raise WebConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_web_config(path: Path) -> WebConfig:
    """Read and check a web config file; every problem is a WebConfigError naming the file."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise WebConfigError(f"web config {path}: cannot read it: {getattr(err, 'strerror', None) or err}") from err
    try:
        return parse_web_config(text, path.resolve().parent)
    except WebConfigError as err:
        raise WebConfigError(f"web config {path}: {err}") from err


def parse_web_config(text: str, base_dir: Path) -> WebConfig:
    """Parse the YAML text of a web config; relative paths are taken from `base_dir`."""
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: builds plain data only
    except yaml.YAMLError as err:
        raise WebConfigError("not valid YAML: " + " ".join(str(err).split())) from err
    top = _mapping(doc, "the file", {"tls_server_config", "http_server_config", "basic_auth_users"})
    tls_doc = _mapping(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS)
    http = _mapping(top.get("http_server_config"), "http_server_config", {"http2", "headers"})
    users = _mapping(top.get("basic_auth_users"), "basic_auth_users", None)
    return WebConfig(
        tls=_tls(tls_doc, base_dir) if tls_doc else None,
        users={_str(name, "basic_auth_users key"): _bcrypt_hash(name, h) for name, h in users.items()},
        headers=_headers(_mapping(http.get("headers"), "http_server_config.headers", None)),
        http2=_bool(http.get("http2", True), "http_server_config.http2"),
    )


def _mapping(value: Any, where: str, known: set[str] | None) -> dict[str, Any]:
    if value is None:
        return {}  # `key:` with nothing under it, as Go reads it
    if not isinstance(value, dict):
        raise WebConfigError(f"{where} must be a mapping, not {type(value).__name__}")
    unsupported = _UNSUPPORTED.get(where, {})
    for key in value:
        if key in unsupported:
            raise WebConfigError(f"{where}: {key}: {unsupported[key]}")
        if known is not None and key not in known:
            raise WebConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where} must be a string, not {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise WebConfigError(f"{where} must be true or false, not {value!r}")
    return value


def _choice(value: Any, where: str, choices: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise WebConfigError(f"{where} must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def _tls(doc: dict[str, Any], base_dir: Path) -> TlsServerConfig:
    def path(key: str) -> Path | None:
        value = _str(doc.get(key, ""), f"tls_server_config.{key}")
        return base_dir / value if value else None  # "" is unset, as in Go

    cert, key, ca = path("cert_file"), path("key_file"), path("client_ca_file")
    if cert is None or key is None:
        raise WebConfigError("tls_server_config needs both cert_file and key_file")
    auth = doc.get("client_auth_type", "NoClientCert") or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError(
            f"tls_server_config.client_auth_type {auth} is not supported (it accepts any certificate); "
            "use RequireAndVerifyClientCert with client_ca_file"
        )
    auth = _choice(auth, "tls_server_config.client_auth_type", CLIENT_AUTH)
    if auth == "NoClientCert" and ca is not None:
        raise WebConfigError("tls_server_config.client_ca_file is set but client_auth_type is NoClientCert")
    if auth != "NoClientCert" and ca is None:
        raise WebConfigError(f"tls_server_config.client_auth_type {auth} needs client_ca_file")
    sans = doc.get("client_allowed_sans") or []
    if not isinstance(sans, list):
        raise WebConfigError("tls_server_config.client_allowed_sans must be a list of strings")
    if sans and auth != "RequireAndVerifyClientCert":
        raise WebConfigError("tls_server_config.client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    lo = _choice(doc.get("min_version", "TLS12"), "tls_server_config.min_version", TLS_VERSIONS)
    hi = _choice(doc.get("max_version", "TLS13"), "tls_server_config.max_version", TLS_VERSIONS)
    if TLS_VERSIONS[lo] > TLS_VERSIONS[hi]:
        raise WebConfigError(f"tls_server_config.min_version {lo} is above max_version {hi}")
    prefer = _bool(doc.get("prefer_server_cipher_suites", True), "tls_server_config.prefer_server_cipher_suites")
    return TlsServerConfig(
        cert, key, auth, ca, tuple(_str(s, "a client_allowed_sans entry") for s in sans), lo, hi, prefer
    )


def _bcrypt_hash(user: str, value: Any) -> bytes:
    h = _str(value, f"basic_auth_users.{user}")
    m = _BCRYPT.fullmatch(h)
    if m is None:
        raise WebConfigError(f"basic_auth_users.{user} is not a bcrypt hash ($2y$10$...); {_HTPASSWD}")
    if not 4 <= int(m.group(1)) <= 31:  # bcrypt's cost range (Go's bcrypt.MinCost..MaxCost)
        raise WebConfigError(f"basic_auth_users.{user}: bcrypt cost {m.group(1)} is outside 4..31")
    return h.encode()


def _headers(doc: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in doc.items():
        if name not in HEADERS:
            raise WebConfigError(f"http_server_config.headers: {name!r} cannot be set (allowed: {', '.join(HEADERS)})")
        v = _str(value, f"http_server_config.headers.{name}")
        if HEADERS[name] and v not in HEADERS[name]:
            raise WebConfigError(f"http_server_config.headers.{name} must be one of {', '.join(HEADERS[name])}")
        if v:  # blank means unset
            out.append((name, v))
    return tuple(out)


def _refuse_encrypted_key() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal, which a service cannot answer.
    raise WebConfigError("the private key is encrypted; the collector needs an unencrypted key_file")


def server_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """An SSLContext serving `tls`'s certificate, checking client certificates as it says."""
    for f in tls.files():
        if "\0" in str(f):
            raise WebConfigError(f"{str(f)!r} is not a file name")
        if not os.access(f, os.R_OK):
            raise WebConfigError(f"cannot read {f}: {'no such file' if not f.exists() else 'permission denied'}")
    # PROTOCOL_TLS_SERVER: no hostname check of clients, OpenSSL's secure defaults otherwise.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    if not tls.prefer_server_cipher_suites:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=_refuse_encrypted_key)
    except (ssl.SSLError, OSError) as err:
        raise WebConfigError(
            f"cert_file {tls.cert_file} and key_file {tls.key_file} are not a PEM certificate and its key ({err})"
        ) from err
    if tls.client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as err:
            raise WebConfigError(f"client_ca_file {tls.client_ca_file} holds no PEM certificate ({err})") from err
        ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    return ctx


def peer_allowed(peercert: Mapping[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """Whether a verified client certificate has a SAN (DNS, IP, email or URI) in `allowed`."""
    if not allowed:
        return True
    names = {_canonical(kind, value) for kind, value in (peercert or {}).get("subjectAltName", ())}
    return any(_canonical("IP Address", a) in names or a in names for a in allowed)


def _canonical(kind: str, value: str) -> str:
    # ssl spells IPv6 SANs "2001:DB8:0:0:0:0:0:1"; Go (and so exporter-toolkit configs) "2001:db8::1".
    if kind == "IP Address":
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            return value
    return value


class AuthBusy(RuntimeError):
    """Credentials not seen before could not be checked in time: too many others wait for bcrypt."""


class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes, caching outcomes like exporter-toolkit.

    bcrypt is slow on purpose (about 70 ms at cost 10), so a scrape every few seconds would
    pay it each time: the outcome of each (user, hash, password) is cached. The cache key
    is an HMAC under a key drawn at start, so the cache holds no password or fast hash of
    one, and its lookups reveal nothing an attacker can steer. Unknown users are checked
    against a decoy hash of the same cost, so timing does not tell which users exist.

    Successes and failures are cached apart, so wrong passwords, however many, never evict
    a verified one: a known scraper is answered from the cache, without waiting for bcrypt.
    Credentials not seen before wait for bcrypt a bounded time, in a bounded queue where each
    client address holds at most two places, so one flooding client cannot keep a new scraper
    (or one after a restart, when nothing is cached) out; the same credentials asked for at once
    share one check. Past these bounds `check` raises AuthBusy (the endpoint answers 503).
    """

    CACHE_SIZE = 100
    """Verified credentials kept (exporter-toolkit's size): a few scrapers with a few users fit many times over."""
    FAILURE_CACHE_SIZE = 100
    """Refused credentials kept, so that a scraper left with an old password does not pay bcrypt every scrape."""
    HASH_QUEUE = 8
    """Checks that may wait for bcrypt at once; a flood's further attempts are turned away at once."""
    HASH_QUEUE_PER_CLIENT = 2
    """Places in that queue one client address may hold: a scraper asks one at a time."""
    HASH_WAIT_S = 2.0
    """How long a check waits for bcrypt: about 20 checks at cost 10, well inside a 10 s scrape timeout."""
    _DECOY = "fZPlRQ4CRkjyubha9O/KW.5GFsI/1AjCfqNLF1o89qlRsjfprSpNe"
    """Salt and digest of a bcrypt hash of a throwaway phrase; the cost is set to match the users'."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._failed: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        # One bcrypt at a time: a flood of wrong passwords costs one core, not all of them.
        self._bcrypt = _Turns()
        self._queued: dict[str, int] = {}
        """Checks waiting for (or running) bcrypt, by client address; guarded by _cache_lock."""
        self._running: dict[bytes, threading.Event] = {}
        """Credentials being checked (by cache key), set when their outcome is cached; guarded by _cache_lock."""

    def check(self, users: Mapping[str, bytes], authorization: str | None, client: str = "") -> bool:
        """True when `authorization` (the header's value) names a user of `users` with its password.

        Raises AuthBusy when the credentials are not cached and `client` (its address) cannot
        have bcrypt in time.
        """
        creds = _parse_basic(authorization)
        if creds is None or not users:
            return False
        user, password = creds
        known = users.get(user)
        hashed = known if known is not None else self._decoy(users)
        message = b"".join(_length_prefixed(v) for v in (user.encode(), hashed, password))
        key = hmac.digest(self._key, message, "sha256")
        cached = self._cached(key)
        if cached is not None:
            return cached
        with self._cache_lock:
            running = self._running.get(key)
            if running is None:
                self._running[key] = threading.Event()
        if running is not None:  # the same credentials are being checked (scrapes at once): share that
            running.wait(2 * self.HASH_WAIT_S)
            cached = self._cached(key)
            if cached is None:
                raise AuthBusy("the same credentials could not be checked in time")
            return cached
        try:
            # bcrypt reads 72 bytes at most; htpasswd and Go truncate longer passwords the same way.
            ok = self._hash_check(password[:72], hashed, client) and known is not None
            with self._cache_lock:
                cache, size = (self._ok, self.CACHE_SIZE) if ok else (self._failed, self.FAILURE_CACHE_SIZE)
                cache[key] = None
                while len(cache) > size:
                    cache.popitem(last=False)
            return ok
        finally:
            with self._cache_lock:
                self._running.pop(key).set()

    def _cached(self, key: bytes) -> bool | None:
        with self._cache_lock:
            for cache, outcome in ((self._ok, True), (self._failed, False)):
                if key in cache:
                    cache.move_to_end(key)
                    return outcome
        return None

    def _hash_check(self, password: bytes, hashed: bytes, client: str) -> bool:
        with self._cache_lock:
            if sum(self._queued.values()) >= self.HASH_QUEUE:
                raise AuthBusy(f"{self.HASH_QUEUE} password checks already wait for bcrypt")
            if self._queued.get(client, 0) >= self.HASH_QUEUE_PER_CLIENT:
                raise AuthBusy(f"{self.HASH_QUEUE_PER_CLIENT} password checks of this client already wait")
            self._queued[client] = self._queued.get(client, 0) + 1
        try:
            if not self._bcrypt.acquire(timeout=self.HASH_WAIT_S):
                raise AuthBusy(f"bcrypt was not free within {self.HASH_WAIT_S:g}s")
            try:
                return _checkpw(password, hashed)
            finally:
                self._bcrypt.release()
        finally:
            with self._cache_lock:
                self._queued[client] -= 1
                if not self._queued[client]:
                    del self._queued[client]

    def _decoy(self, users: Mapping[str, bytes]) -> bytes:
        cost = max(int(h[4:6]) for h in users.values())
        return f"$2y${cost:02d}${self._DECOY}".encode()


class _Turns:
    """A lock taken in order of arrival: threading.Lock lets a newcomer barge in ahead of a waiter,
    so a flooding client's next attempt could take bcrypt again and again before a scraper's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: deque[threading.Event] = deque()
        self._busy = False

    def acquire(self, timeout: float) -> bool:
        """Take the lock within `timeout` seconds, after those who asked before; False when it did not come."""
        with self._lock:
            if not self._busy:
                self._busy = True
                return True
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout):
            return True
        with self._lock:
            if turn.is_set():  # handed over just as the wait ran out
                return True
            self._waiting.remove(turn)
            return False

    def release(self) -> None:
        """Hand the lock to the longest waiting, or free it."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # still busy: it is theirs now
            else:
                self._busy = False


def _length_prefixed(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)  # compares in constant time
    except ValueError:  # a hash bcrypt rejects despite its shape: no one gets in with it
        log.warning("a basic_auth_users hash is not usable by bcrypt")
        return False


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) of an `Authorization: Basic` header value (RFC 7617), or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode(), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class WebState:
    """One loaded version of the web config: what a connection is served under."""

    config: WebConfig
    context: ssl.SSLContext | None
    auth: BasicAuth

    def authorized(self, authorization: str | None, client: str = "") -> bool:
        """True when no users are configured or the header carries valid credentials; AuthBusy: not checked."""
        return not self.config.users or self.auth.check(self.config.users, authorization, client)


class WebConfigFile:
    """A web config file, loaded at start (errors raise) and reloaded when it or a file it names changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._auth = BasicAuth()
        self._lock = threading.Lock()
        self._files: tuple[Path, ...] = (path,)
        self._state = self._load()
        self._signature = self._stat()
        self._error: WebConfigError | None = None
        self.tls = self._state.context is not None
        """Whether the endpoint serves HTTPS; fixed at start, as in exporter-toolkit."""
        if self._state.config.users and not self.tls:
            log.warning("%s: basic auth without tls_server_config sends passwords in clear text", path)

    @property
    def summary(self) -> str:
        """What the loaded config turns on, for the startup line, e.g. "TLS, client certificates, basic auth"."""
        config = self._state.config
        parts = ["TLS"] if config.tls else []
        if config.tls and config.tls.client_auth_type != "NoClientCert":
            parts.append("client certificates")
        if config.users:
            parts.append("basic auth")
        return ", ".join(parts) or "open"

    def current(self) -> WebState:
        """The config to serve a connection under; raises WebConfigError while a changed file does not load."""
        signature = self._stat()
        with self._lock:
            if signature != self._signature:
                files, self._signature = self._files, signature
                try:
                    state = self._load()
                    if (state.context is not None) != self.tls:
                        raise WebConfigError(f"web config {self.path}: turning TLS on or off needs a restart")
                except WebConfigError as err:
                    self._error = err
                    log.error("%s; refusing requests until it is fixed", err)
                else:
                    self._state, self._error = state, None
                    log.info("web config %s reloaded", self.path)
                if self._files != files:  # it names other files now: watch those from here on
                    self._signature = self._stat()
            if self._error is not None:
                raise self._error
            return self._state

    def _load(self) -> WebState:
        config = load_web_config(self.path)
        self._files = (self.path, *(config.tls.files() if config.tls else ()))
        try:
            context = server_context(config.tls) if config.tls else None
        except WebConfigError as err:
            raise WebConfigError(f"web config {self.path}: {err}") from err
        return WebState(config, context, self._auth)

    def _stat(self) -> tuple[tuple[int, int, int] | None, ...]:
        def one(p: Path) -> tuple[int, int, int] | None:
            try:
                st = p.stat()  # follows symlinks: a Kubernetes secret swaps its ..data link
            except OSError:
                return None
            return (st.st_ino, st.st_size, st.st_mtime_ns)

        return tuple(one(p) for p in self._files)
