"""What the API needs besides the store: the token, which reads are open, limits and hooks."""

from collections.abc import Callable
from dataclasses import dataclass, field

from core.labels import HOSTNAME
from service.actuator import Actuator
from service.ingest import IngestBuffer
from service.scorer import Scorer

BODY_TIMEOUT_S = 10.0
"""A request body must arrive within this, else 408 and the connection is closed (slow clients)."""


@dataclass
class ApiConfig:
    """What the API needs besides the store (the CLI fills it from settings)."""

    token: str | None = None
    read_open: bool = True
    metrics_open: bool | None = None
    """/metrics without the token; None: as `read_open` (Prometheus can send the bearer token)."""
    max_request_bytes: int = 1_048_576
    body_timeout_s: float = BODY_TIMEOUT_S
    host_label: str = HOSTNAME
    scorer: Scorer | None = None
    buffer: IngestBuffer | None = None
    actuator: Actuator | None = None
    """The actuator loop, when `serve --actuate` runs one (its breaker is reset through the API)."""
    collector_health: Callable[[], tuple[bool, str]] | None = None
    """The in-process collector's health (/healthz), when one runs."""
    extra_metrics: Callable[[], bytes] | None = None
    """More exposition text for /metrics (the in-process collector's series)."""
    on_start: list[Callable[[], None]] = field(default_factory=list)
    on_stop: list[Callable[[], None]] = field(default_factory=list)

    @property
    def bearer_token(self) -> str | None:
        """The token clients must send; None when it is empty or blank."""
        # An empty or blank token is no token: writes are disabled (and the CLI says so), rather
        # than every write answering "invalid token".
        return self.token if self.token and self.token.strip() else None

    @property
    def scrape_open(self) -> bool:
        """Whether /metrics answers without the token."""
        return self.read_open if self.metrics_open is None else self.metrics_open
