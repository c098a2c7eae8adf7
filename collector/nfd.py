"""Kubernetes labels through Node Feature Discovery: one feature file, no Kubernetes credentials.

`gpuhealth collect --nfd-features-dir DIR --service-url URL` asks the central service every
interval for this node's GPUs and writes their verdict into NFD's local feature source
(`DIR/gpuhealth`); nfd-worker reads it and nfd-master labels (and, with a NodeFeatureRule,
taints) the node. The collector needs no RBAC, and labels of a dead collector expire::

    # +expiry-time=2026-12-01T12:00:00Z
    gpuhealth.io/decision=demote
    gpuhealth.io/risk-bucket=7
    gpuhealth.io/gpu=3

- `decision`: the worst decision among the node's GPUs (unscored GPUs count as ok);
- `risk-bucket`: floor(10 × the highest risk), an integer 0..10, because NFD's Gt/Lt compare integers;
- `gpu`: the index of the GPU that sets the decision (left out when the node is ok; `unknown` when
  the service does not know it).

The file is replaced atomically (a dot file in the same directory, which nfd-worker ignores,
fsynced, then renamed), and only when the labels changed or less than half of the expiry
window is left. When the service does not answer, the last file stays (it expires by itself).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from core.identity import UNKNOWN_INDEX
from core.kube_labels import is_label_value, label_value
from core.service_client import NodeView, ServiceError, UnknownNode, node_gpus
from core.worker import Worker

log = logging.getLogger(__name__)

DOMAIN = "gpuhealth.io"
"""Our label prefix: a prefixed key is taken as it is by NFD (an unprefixed one gets feature.node.kubernetes.io/)."""
FILE_NAME = "gpuhealth"
"""The one feature file we own in the features directory."""
DEFAULT_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")
DEFAULT_INTERVAL_S = 60.0
EXPIRY_INTERVALS = 3
"""Labels expire this many intervals after they were written: a dead collector's labels go away."""
EXPIRY_DIRECTIVE = "# +expiry-time="
STAGES = ("service", "write")
"""Where a round can fail: asking the service (or an answer that makes no labels), or writing the file."""


@dataclass(frozen=True)
class NodeLabels:
    """What the feature file says about the node."""

    decision: str
    risk_bucket: int
    gpu: int | None = None
    """Index of the GPU that sets the decision (-1: unknown, said `unknown`); None when the node is ok."""

    def lines(self) -> list[str]:
        """`key=value` lines, in a fixed order; every value a valid Kubernetes label value (else ValueError)."""
        values = {"decision": self.decision, "risk-bucket": str(self.risk_bucket)}
        if self.gpu is not None:
            values["gpu"] = label_value(self.gpu)
        for k, v in values.items():
            if not is_label_value(v):
                raise ValueError(f"{DOMAIN}/{k}={v!r} is not a Kubernetes label value")
        return [f"{DOMAIN}/{k}={v}" for k, v in values.items()]


def risk_bucket(risks: Iterable[float | None]) -> int:
    """floor(10 × the highest risk), clamped to 0..10; None and NaN are left out, and no risk at all is 0."""
    known = [r for r in risks if r is not None and not math.isnan(r)]
    if not known:
        return 0
    return min(10, max(0, math.floor(10 * max(known))))


def node_labels(view: NodeView) -> NodeLabels:
    """The labels for a node as the service sees it (the `gpu` label: `NodeView.worst_gpu`)."""
    top = view.worst_gpu()
    return NodeLabels(
        decision=view.decision,
        risk_bucket=risk_bucket(g.risk for g in view.gpus),
        gpu=None if top is None else UNKNOWN_INDEX if top.gpu_index is None else top.gpu_index,
    )


def rfc3339(t: datetime) -> str:
    """UTC, whole seconds, `Z`: what NFD's time.Parse(time.RFC3339) reads."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def feature_body(labels: NodeLabels) -> str:
    """The file without its expiry: what decides whether the file changed."""
    return "".join(f"{line}\n" for line in labels.lines())


def feature_text(labels: NodeLabels, expires: datetime) -> str:
    """The whole feature file: the expiry directive first (it applies to the lines after it)."""
    return f"{EXPIRY_DIRECTIVE}{rfc3339(expires)}\n{feature_body(labels)}"


def split_expiry(text: str) -> tuple[datetime | None, str]:
    """(the file's expiry, None if it has none or an unreadable one; the file without expiry lines)."""
    expires: datetime | None = None
    rest: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(EXPIRY_DIRECTIVE):
            try:
                expires = datetime.fromisoformat(stripped[len(EXPIRY_DIRECTIVE) :].strip())
            except ValueError:
                expires = None
            if expires is not None and expires.tzinfo is None:
                expires = None  # NFD requires an offset; treat as unreadable
            continue
        if stripped:
            rest.append(stripped)
    return expires, "".join(f"{line}\n" for line in rest)


def needs_rewrite(current: str | None, body: str, now: datetime, window: timedelta) -> bool:
    """Whether to write the file: it is missing, its labels differ from `body`, or less than half of
    the expiry `window` is left (so it never expires while the collector runs)."""
    if current is None:
        return True
    expires, old_body = split_expiry(current)
    if old_body != body or expires is None:
        return True
    return expires - now < window / 2


def read_current(path: Path) -> str | None:
    """The file's text, None if there is none (an unreadable file is an OSError)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return ""  # not ours as written: rewrite it


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a reader sees the old file or the new one, never a part.

    The text goes to a dot file in the same directory (nfd-worker skips dot files), is
    fsynced, made world-readable and renamed over `path`; the directory is fsynced after.
    On any failure the temporary file is removed and the old file stays.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; some filesystems cannot fsync a directory, which is no error here."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class NfdStats:
    errors: dict[str, int]
    """Failed rounds by stage (`STAGES`)."""
    writes: int
    last_success: float | None


@dataclass(frozen=True)
class NfdConfig:
    """Where to write, whom to ask and how often."""

    directory: Path
    service_url: str
    hostname: str
    """This node's name as the service knows it: the host label the collector exports."""
    token: str | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = 5.0

    @property
    def path(self) -> Path:
        return self.directory / FILE_NAME

    @property
    def window(self) -> timedelta:
        """How long a written file stays valid."""
        return timedelta(seconds=EXPIRY_INTERVALS * self.interval_s)


class NfdLabeler(Worker):
    """Every `interval_s`, asks the service for the node and rewrites the feature file when it must."""

    thread_name = "gpuhealth-nfd"
    stop_timeout_s = 10.0

    def __init__(
        self,
        config: NfdConfig,
        fetch: Callable[[], NodeView] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if config.interval_s <= 0:
            raise ValueError(f"NFD interval must be positive, got {config.interval_s}")
        super().__init__()
        self.config = config
        self._fetch = fetch or (lambda: node_gpus(config.service_url, config.hostname, config.token, config.timeout_s))
        self._clock = clock
        self._lock = threading.Lock()
        self.errors = dict.fromkeys(STAGES, 0)
        """Failed rounds by stage, since start."""
        self.writes = 0
        """Times the file was written."""
        self.last_success: float | None = None
        """Unix time of the last round that asked the service and left the file right."""
        self._failing: str | None = None  # the stage of the outage under way, None when healthy

    def run_once(self) -> bool:
        """One round: ask, compare, write if needed; False when the service or the write failed."""
        now = self._clock()
        try:
            view = self._fetch()
        except ServiceError as err:
            self._failed("service", err)
            return False
        try:
            labels = node_labels(view)
            body = feature_body(labels)
        except (ValueError, LookupError, ArithmeticError) as err:  # an answer that makes no labels: the last stay
            self._failed("service", ValueError(f"no labels from the service's answer: {err!r}"))
            return False
        path = self.config.path
        at = datetime.fromtimestamp(now, UTC)
        try:
            if needs_rewrite(read_current(path), body, at, self.config.window):
                write_atomic(path, feature_text(labels, at + self.config.window))
                with self._lock:
                    self.writes += 1
                log.debug("wrote %s: %s", path, ", ".join(labels.lines()))
        except OSError as err:
            self._failed("write", err)
            return False
        with self._lock:
            self.last_success = now
        if self._failing is not None:
            log.info("NFD labels: working again; %s is up to date (%s)", path, ", ".join(labels.lines()))
            self._failing = None
        return True

    def _failed(self, stage: str, err: Exception) -> None:
        with self._lock:
            self.errors[stage] += 1
        if self._failing == stage:
            log.debug("NFD labels: still failing: %s", err)
            return
        self._failing = stage
        expires = _expiry_note(self.config.path)
        what = "cannot ask the service" if stage == "service" else f"cannot write {self.config.path}"
        hint = " (is the collector's --hostname the host the service stores?)" if isinstance(err, UnknownNode) else ""
        log.warning("NFD labels: %s: %s%s; keeping the last labels%s", what, err, hint, expires)

    def stats(self) -> NfdStats:
        """The counters, read together."""
        with self._lock:
            return NfdStats(dict(self.errors), self.writes, self.last_success)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # a bug must not end the loop: the labels would silently expire
                log.exception("NFD labels: round failed")
            self._stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - started)))


def _expiry_note(path: Path) -> str:
    try:
        text = read_current(path)
    except OSError:
        return ""
    if text is None:
        return " (none written yet)"
    expires, _ = split_expiry(text)
    return f" (they expire at {rfc3339(expires)})" if expires is not None else ""


class NfdCollector(Collector):
    """gpuhealth_nfd_* series: failed rounds by stage, file writes, the last good round."""

    def __init__(self, labeler: NfdLabeler) -> None:
        self._labeler = labeler

    def collect(self) -> Iterator[Metric]:
        st = self._labeler.stats()
        fam = CounterMetricFamily(
            "gpuhealth_nfd_errors",
            "NFD label rounds that failed, by stage (service: no usable answer; write: the feature file).",
            labels=["stage"],
        )
        for stage in STAGES:
            fam.add_metric([stage], float(st.errors[stage]))
        yield fam
        yield CounterMetricFamily("gpuhealth_nfd_writes", "Times the NFD feature file was written.", value=st.writes)
        yield GaugeMetricFamily(
            "gpuhealth_nfd_last_success_timestamp_seconds",
            "Unix time of the last round that asked the service and left the NFD feature file right (0: none yet).",
            value=st.last_success or 0.0,
        )
