"""Prometheus exporter: dcgm-exporter-compatible names and labels, rendered from snapshots.

Collectors follow prometheus_client's custom-collector pattern (`collect()` yields
metric families), so tests use their own `CollectorRegistry`. The HTTP endpoint
renders those families with `render()` rather than `generate_latest`, because
prometheus_client forces a `_total` suffix on every counter's TYPE line while
dcgm-exporter exports counters under bare DCGM names (`DCGM_FI_DEV_PCIE_REPLAY_COUNTER`
typed `counter`); keeping the exact names is the point of being compatible.
"""

from __future__ import annotations

import gzip
import io
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from collector.attribution import LabelSet
from collector.sampler import CollectorStatus, Sampler, Snapshot
from collector.webconfig import AuthBusy, WebConfigError, WebConfigFile, WebState, peer_allowed
from core.catalog import Field, LabelField, default_labels
from core.labels import HOSTNAME

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("gpu", "UUID", "device", "modelName", "pci_bus_id")
"""dcgm-exporter's per-GPU labels; the host label (one of `core.labels.HOST_LABELS`) is added."""
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
"""dcgm-exporter's labels of a MIG instance's series, added to its GPU's (gpu, UUID, ... stay the GPU's)."""
GZIP_LEVEL = 6
"""zlib's default trade-off: one 8-GPU node's 147 kB shrink to 7.1 kB in about 0.6 ms (docs/metrics.md).
Compressed per scrape, not cached per snapshot: Prometheus scrapes a 10 s snapshot about once, and the
scrape-health and probe series change between scrapes."""
HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS client gets this long to finish its handshake (Prometheus's default scrape timeout), so a
silent connection ties up its own thread only, and only for a while."""
HEADER_TIMEOUT_S = 5.0
"""A client gets this long (after the handshake) to send its request line and headers, however it
spaces its bytes: without it each silent or dripping connection held a thread for good. As the
service's (api/server.py): Prometheus and the kubelet send theirs within milliseconds."""
IO_TIMEOUT_S = 10.0
"""Each read or write after the head: a scraper that stops reading the answer lets go of its thread."""


def gpu_labels(info_index: int, uuid: str, model: str, pci: str, host: str, host_label: str) -> dict[str, str]:
    """The label set dcgm-exporter puts on every per-GPU series."""
    return {
        "gpu": str(info_index),
        "UUID": uuid,
        "device": f"nvidia{info_index}",
        "modelName": model,
        "pci_bus_id": pci,
        host_label: host,
    }


class GpuCollector(Collector):
    """Per-GPU series from the latest snapshot; builds its families once per snapshot."""

    def __init__(
        self,
        source: Callable[[], Snapshot | None],
        fields: Sequence[Field],
        hostname_label: str = HOSTNAME,
        label_fields: Sequence[LabelField] | None = None,
    ) -> None:
        self._source = source
        self._fields = tuple(fields)
        self._host_label = hostname_label
        self._label_fields = default_labels() if label_fields is None else tuple(label_fields)
        """DCGM_FI_DRIVER_VERSION and the like: on every series of a GPU, as dcgm-exporter does (unless blank)."""
        self._cache: tuple[int, list[Metric]] | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        snap = self._source()
        if snap is None:
            return iter(())
        with self._lock:
            if self._cache is None or self._cache[0] != snap.seq:
                self._cache = (snap.seq, self._build(snap))
            return iter(self._cache[1])

    def _build(self, snap: Snapshot) -> list[Metric]:
        labels = {
            r.info.uuid: gpu_labels(
                r.info.index, r.info.uuid, r.info.model_name, r.info.pci_bus_id,
                r.info.hostname, self._host_label,
            ) | {lf.dcgm_name: v for lf in self._label_fields if (v := str(getattr(r.info, lf.name, "")))}
            for r in snap.readings
        }  # fmt: skip
        # One label set per workload on the GPU (pod, hpc_job), or the GPU's own without any.
        series = {uuid: with_workloads(base, snap.workloads.get((uuid, None), ())) for uuid, base in labels.items()}
        mig_series = _mig_series(snap, labels)
        out: list[Metric] = []
        for f in self._fields:
            fam = _field_family(f, snap, series, mig_series)
            if fam.samples:
                out.append(fam)
        xid = Metric(
            "gpuhealth_xid_errors",
            "XID errors seen since the collector started, by code.",
            "counter",
        )
        for r in snap.readings:
            for code, n in sorted(snap.xid_counts.get(r.info.uuid, {}).items()):
                for s in series[r.info.uuid]:
                    xid.add_sample("gpuhealth_xid_errors_total", {**s, "xid": str(code)}, float(n))
        if xid.samples:
            out.append(xid)
        lost = GaugeMetricFamily("gpuhealth_gpu_lost", "1 when the GPU stopped answering (fell off the bus).")
        for r in snap.readings:
            for s in series[r.info.uuid]:
                lost.add_sample("gpuhealth_gpu_lost", s, 1.0 if r.lost else 0.0)
        out.append(lost)
        out.append(
            GaugeMetricFamily(
                "gpuhealth_gpus",
                "GPUs visible and answering.",
                value=sum(not r.lost for r in snap.readings),
            )
        )
        return out


def with_workloads(base: dict[str, str], workloads: Sequence[LabelSet]) -> list[dict[str, str]]:
    """The label sets of a device's series: `base` joined with each workload's labels, or `base` alone."""
    return [{**base, **w} for w in workloads] if workloads else [base]


def _mig_series(snap: Snapshot, labels: dict[str, dict[str, str]]) -> dict[tuple[str, int], list[dict[str, str]]]:
    """The label sets of each MIG instance's series: its GPU's, GPU_I_PROFILE and GPU_I_ID, its workloads."""
    out = {}
    for r in snap.readings:
        for m in r.mig:
            key = (r.info.uuid, m.instance.gpu_instance_id)
            base = {**labels[r.info.uuid], **dict(zip(MIG_LABELS, (m.instance.profile, str(key[1])), strict=True))}
            out[key] = with_workloads(base, snap.workloads.get(key, ()))
    return out


def _field_family(
    f: Field,
    snap: Snapshot,
    series: dict[str, list[dict[str, str]]],
    mig_series: dict[tuple[str, int], list[dict[str, str]]],
) -> Metric:
    """One catalogue field's samples: per GPU, and per MIG instance where the backend reads it per instance."""
    fam = Metric(f.metric_name, f.help, f.kind)
    for r in snap.readings:
        if r.lost:
            continue
        v = r.values.get(f.name)
        if v is not None and v == v:  # absent or NaN: no sample
            for s in series[r.info.uuid]:
                fam.add_sample(f.metric_name, s, float(v))
        for m in r.mig:
            v = m.values.get(f.name)
            if v is not None and v == v:
                for s in mig_series[(r.info.uuid, m.instance.gpu_instance_id)]:
                    fam.add_sample(f.metric_name, s, float(v))
    return fam


class SelfCollector(Collector):
    """Scrape health in the node_exporter style: success, duration and age of the data."""

    def __init__(
        self,
        sampler: Sampler,
        clock: Callable[[], float] | None = None,
        extra: Sequence[Callable[[], Mapping[str, CollectorStatus]]] = (),
    ) -> None:
        self._sampler = sampler
        self._clock = clock or sampler.clock
        self._extra = tuple(extra)
        """Statuses of collectors that read at scrape time (collector.infiniband), registered before this one."""

    def collect(self) -> Iterator[Metric]:
        snap = self._sampler.latest
        success = GaugeMetricFamily(
            "gpuhealth_collector_success",
            "1 if the collector's last run succeeded.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "gpuhealth_collector_duration_seconds",
            "Duration of the collector's last run in seconds.",
            labels=["collector"],
        )
        if snap is None:
            success.add_metric(["sample"], 0.0)
            yield success
            return
        statuses = dict(snap.status)
        for more in self._extra:
            statuses.update(more())
        for name, st in sorted(statuses.items()):
            success.add_metric([name], 1.0 if st.success else 0.0)
            duration.add_metric([name], st.duration_s)
        yield success
        yield duration
        yield GaugeMetricFamily(
            "gpuhealth_sample_age_seconds",
            "Age of the snapshot this scrape renders, in seconds.",
            value=max(0.0, self._clock() - snap.taken_at),
        )


def render(metrics: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4, with counter names kept exactly as their samples spell them."""
    out: list[str] = []
    # Per-GPU label dicts are shared by every family of a snapshot: escape each once. The
    # cache holds the dict itself, so its id() cannot be reused by another dict meanwhile.
    label_cache: dict[int, tuple[dict[str, str], str]] = {}
    for m in metrics:
        if not m.samples:
            continue
        typ = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(m.type, m.type)
        # Counters and infos are written under their samples' name (`_total`, `_info`).
        head = m.samples[0].name if m.type in ("counter", "info") else m.name
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {head} {doc}\n# TYPE {head} {typ}\n")
        for s in m.samples:
            hit = label_cache.get(id(s.labels))
            if hit is None or hit[0] is not s.labels:
                hit = (s.labels, _labels(s.labels))
                label_cache[id(s.labels)] = hit
            out.append(f"{s.name}{hit[1]} {floatToGoString(s.value)}\n")
    return "".join(out).encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


class ExporterServer:
    """HTTP endpoint: /metrics, /healthz and a small index page; TLS and basic auth from `web`.

    With a web config, every path needs the credentials, /healthz included, as
    exporter-toolkit protects every path of node_exporter: a liveness probe sends them too.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        health: Callable[[], tuple[bool, str]],
        host: str,
        port: int,
        web: WebConfigFile | None = None,
    ) -> None:
        self.registry = registry
        self.health = health
        self.web = web
        self.httpd = _HttpServer((host, port), _make_handler(self), web)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def scheme(self) -> str:
        """ "https" when the web config turns TLS on, else "http"."""
        return "https" if self.web is not None and self.web.tls else "http"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="gpuhealth-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        # shutdown() waits for serve_forever to notice; without a running loop it would hang.
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()


class _HttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that serves each connection under the web config's current version.

    The TLS handshake runs in the connection's own thread (not in `accept`, as wrapping the
    listening socket would do), so a client that never finishes it cannot stall the others.
    """

    request_queue_size = 128
    """The listen backlog: socketserver's 5 overflowed under a burst of clients, and a connection
    the kernel dropped waits a second for its SYN to be sent again (Go's servers use somaxconn)."""

    def __init__(self, address: tuple[str, int], handler: type[_SecuredHandler], web: WebConfigFile | None) -> None:
        self.web = web
        self.handler = handler
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.web is None:
            self.handler(request, client_address, self)
            return
        try:
            state: WebState | None = self.web.current()
        except WebConfigError:  # current() logged why; plain HTTP answers 500, TLS cannot answer
            state = None
        if not self.web.tls:
            self.handler(request, client_address, self, state, broken=state is None)
            return
        conn = _handshake(state, request, client_address) if state is not None else None
        if conn is None:
            return
        try:
            self.handler(conn, client_address, self, state)
        finally:
            self.shutdown_request(conn)


def _handshake(state: WebState, sock: socket.socket, peer: Any) -> ssl.SSLSocket | None:
    """The TLS connection over `sock`, or None (logged) when the handshake or the client's SANs fail."""
    assert state.context is not None
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        conn = state.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    except OSError as err:
        log.debug("TLS from %s: %s", peer, err)
        return None
    try:
        conn.do_handshake()
    except (ssl.SSLEOFError, ConnectionError, TimeoutError) as err:
        # TCP health checks and port scans connect and leave: not worth a warning.
        log.debug("TLS handshake with %s ended early: %s", peer, err)
        conn.close()
        return None
    except OSError as err:  # SSLError: bad certificate, unknown CA, plain HTTP on the TLS port
        log.warning("TLS handshake with %s failed: %s", peer[0] if peer else peer, err)
        conn.close()
        return None
    tls = state.config.tls
    if tls is not None and not peer_allowed(conn.getpeercert(), tls.client_allowed_sans):
        log.warning("TLS client %s: no subject alternative name in client_allowed_sans", peer[0] if peer else peer)
        conn.close()
        return None
    conn.settimeout(None)  # the request itself is read as without TLS
    return conn


class _HeadDeadline(io.RawIOBase):
    """A socket's reads, each allowed only what is left of one deadline while a request head is read."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        super().__init__()
        self._sock, self._timeout_s = sock, timeout_s
        self.deadline: float | None = time.monotonic() + timeout_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete request head within {self._timeout_s:g}s")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _SecuredHandler(BaseHTTPRequestHandler):
    """A request handler that knows the web config version its connection is served under."""

    timeout = IO_TIMEOUT_S

    def __init__(
        self, request: Any, client_address: Any, server: Any, web: WebState | None = None, broken: bool = False
    ) -> None:
        self.web = web
        self.web_broken = broken
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: the one below reads the head under a deadline
        self._head = _HeadDeadline(self.connection, HEADER_TIMEOUT_S)
        self.rfile = io.BufferedReader(self._head)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # reads the headers: the head is in (or refused) from here on
        self._head.deadline = None
        self.connection.settimeout(self.timeout)
        return ok

    def allowed(self) -> bool:
        """Whether to serve the request; if not, the refusal has been sent."""
        if self.web_broken:
            self._send(500, b"the collector's web config does not load; see its log\n")
            return False
        try:
            if self.web is None or self.web.authorized(self.headers.get("Authorization"), self.client_address[0]):
                return True
        except AuthBusy as err:  # a flood of unknown passwords: this one was not checked, try again
            log.debug("basic auth from %s not checked: %s", self.client_address[0], err)
            self._send(503, b"too many password checks at once; try again\n", extra=(("Retry-After", "1"),))
            return False
        self._send(401, b"Unauthorized\n", extra=(("WWW-Authenticate", 'Basic realm="gpuhealth collector"'),))
        return False

    def end_headers(self) -> None:
        # http_server_config.headers go on every answer, refusals included, as in exporter-toolkit.
        for name, value in self.web.config.headers if self.web is not None else ():
            self.send_header(name, value)
        super().end_headers()

    def _send(
        self,
        code: int,
        body: bytes,
        ctype: str = "text/plain; charset=utf-8",
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http: " + format, *args)


_VARY = ("Vary", "Accept-Encoding")


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header takes gzip: listed (or `*`) without q=0 (RFC 9110, 12.5.3)."""
    star = False
    for part in (accept_encoding or "").split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        coding = coding.lower()
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return star


def _make_handler(server: ExporterServer) -> type[_SecuredHandler]:
    class Handler(_SecuredHandler):
        def do_GET(self) -> None:
            if not self.allowed():
                return
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body = render(server.registry.collect())
                except Exception as err:  # a scrape must answer, with a reason
                    log.exception("rendering /metrics failed")
                    self._send(500, f"rendering metrics failed: {err}\n".encode())
                    return
                if accepts_gzip(self.headers.get("Accept-Encoding")):  # Prometheus always asks for it
                    body = gzip.compress(body, GZIP_LEVEL, mtime=0)
                    self._send(200, body, CONTENT_TYPE, extra=(("Content-Encoding", "gzip"), _VARY))
                else:
                    self._send(200, body, CONTENT_TYPE, extra=(_VARY,))
            elif path == "/healthz":
                ok, reason = server.health()
                self._send(200 if ok else 503, (reason + "\n").encode())
            elif path == "/":
                self._send(
                    200,
                    b"<html><body><h1>gpuhealth collector</h1>"
                    b'<p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a></p></body></html>',
                    "text/html; charset=utf-8",
                )
            else:
                self._send(404, b"not found: try /metrics or /healthz\n")

    return Handler
