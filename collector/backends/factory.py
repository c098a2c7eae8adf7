"""Open a backend by name; `auto` prefers DCGM, then NVML.

A backend is registered under its name with its options dataclass and its opener (like
node_exporter's registerCollector); the opener, in the backend's own module, turns the
options into the backend, so this module never learns a backend's keyword arguments.

The built-in backends are registered by module name and imported when one is opened, not
here: `replay` needs pandas and pyarrow, `sim` numpy, and the node agent reading NVML or
DCGM should load neither (docs/decisions/0076).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from collector.backends.base import Backend, BackendError, BackendUnavailable, CommonOptions

log = logging.getLogger(__name__)

NO_GPU_LIBRARY = "no GPU library found; use --backend sim to try a simulated fleet"
AUTO_ORDER = ("dcgm", "nvml")
"""What `auto` tries, in order: DCGM first, as dcgm-exporter does when a host engine runs."""

OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class Registered:
    """A backend's options dataclass and the function that opens it."""

    options_cls: type
    opener: Callable[[Any, CommonOptions], Backend]


@dataclass(frozen=True)
class InModule:
    """A backend registered by the names of its module, options dataclass and opener: the
    module is imported when the backend is opened, so listing backends imports none of them."""

    module: str
    options_cls: str
    opener: str

    def load(self) -> Registered:
        found = importlib.import_module(self.module)
        return Registered(getattr(found, self.options_cls), getattr(found, self.opener))


_REGISTRY: dict[str, Registered | InModule] = {}


def register(name: str, options_cls: type[OptionsT], opener: Callable[[OptionsT, CommonOptions], Backend]) -> None:
    """Make backend `name` openable with an `options_cls` instance (or its defaults)."""
    _REGISTRY[name] = Registered(options_cls, opener)


# The built-in backends, in the order the CLI lists them.
_REGISTRY["nvml"] = InModule("collector.backends.nvml", "NvmlOptions", "open_nvml")
_REGISTRY["dcgm"] = InModule("collector.backends.dcgm", "DcgmOptions", "open_dcgm")
_REGISTRY["sim"] = InModule("collector.backends.sim", "SimOptions", "open_sim")
_REGISTRY["replay"] = InModule("collector.backends.replay", "ReplayOptions", "open_replay")


def names() -> tuple[str, ...]:
    """What `open_backend` accepts: `auto` and every registered backend."""
    return ("auto", *_REGISTRY)


def open_backend(name: str, options: object | None, common: CommonOptions) -> Backend:
    """Open the named backend with its options (None: its defaults), or raise BackendError
    with a one-line reason."""
    if name == "auto":
        return _open_auto(common)
    entry = _REGISTRY.get(name)
    if entry is None:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(names())}")
    if isinstance(entry, InModule):
        entry = entry.load()
    if options is None:
        options = entry.options_cls()
    elif not isinstance(options, entry.options_cls):
        raise TypeError(f"the {name} backend takes {entry.options_cls.__name__}, not {type(options).__name__}")
    return entry.opener(options, common)


def _open_auto(common: CommonOptions) -> Backend:
    """The first of AUTO_ORDER whose library loads, with its default options."""
    reasons = []
    for candidate in AUTO_ORDER:
        try:
            return open_backend(candidate, None, common)
        except BackendUnavailable as err:
            log.debug("backend %s unavailable: %s", candidate, err)
            reasons.append(f"{candidate}: {err}")
    log.info("auto backend: %s", "; ".join(reasons))
    raise BackendUnavailable(NO_GPU_LIBRARY)
