"""dcgm-exporter's counters CSV (`--collectors FILE`) read as a selection of catalogue fields.

The format is dcgm-exporter's `etc/default-counters.csv`: one `DCGM FIELD, type, help` per line, where
type is a Prometheus type (gauge, counter, histogram, summary) or `label` (the value goes on every
series of the GPU as a label); `#` starts a comment line, blank lines are skipped, spaces around the
values are ignored. A user keeps their own file: every field the catalogue knows is selected, the
others (dcgm-exporter's own DCGM_EXP_* counters, DCGM fields gpuhealth does not read) are returned
for the caller to report, and a malformed line is a `CountersFileError` naming its number.

The type and help gpuhealth exports are the catalogue's, whatever the file says; a field whose type
in the file differs is returned too, so the caller can say so.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from core import catalog
from core.catalog import Field, LabelField

PROMETHEUS_TYPES = frozenset({"gauge", "counter", "histogram", "summary"})
"""The metric types dcgm-exporter accepts in the file (its promMetricType), besides `label`."""


class CountersFileError(ValueError):
    """The counters file cannot be read or a line is malformed; the message is one line."""


@dataclass(frozen=True)
class CounterRow:
    """One line of the file: the DCGM name, the type it gives and its help text."""

    line: int
    dcgm_name: str
    kind: str
    help: str


@dataclass
class CountersSelection:
    """What a counters file selects from the catalogue, in catalogue order."""

    fields: tuple[Field, ...] = ()
    labels: tuple[LabelField, ...] = ()
    unknown: list[str] = field(default_factory=list)
    """DCGM names the catalogue does not know, in file order: skipped."""
    retyped: list[str] = field(default_factory=list)
    """`NAME (file: T1, exported: T2)` for known names whose type in the file differs from the catalogue's."""


def parse_rows(text: str, source: str = "counters file") -> list[CounterRow]:
    """The rows of a counters CSV; CountersFileError for the first malformed line."""
    rows: list[CounterRow] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            (cells,) = list(csv.reader([line], skipinitialspace=True, strict=True))
        except (csv.Error, ValueError) as err:
            raise CountersFileError(f"{source} line {number}: not CSV ({err}): {line!r}") from None
        cells = [c.strip() for c in cells]
        if len(cells) != 3:
            raise CountersFileError(
                f"{source} line {number}: expected 3 values (DCGM field, type, help), got {len(cells)}: {line!r}"
            )
        name, kind, help_text = cells
        if not name:
            raise CountersFileError(f"{source} line {number}: the DCGM field name is empty: {line!r}")
        if kind != "label" and kind not in PROMETHEUS_TYPES:
            allowed = ", ".join(sorted(PROMETHEUS_TYPES | {"label"}))
            raise CountersFileError(f"{source} line {number}: unknown type {kind!r} (one of {allowed}): {line!r}")
        rows.append(CounterRow(number, name, kind, help_text))
    return rows


def select(rows: list[CounterRow]) -> CountersSelection:
    """The catalogue fields and label fields the rows name (a name listed twice counts once)."""
    named: set[str] = set()
    out = CountersSelection()
    for row in rows:
        known = catalog.BY_DCGM_NAME.get(row.dcgm_name)
        if known is None:
            if row.dcgm_name not in out.unknown:
                out.unknown.append(row.dcgm_name)
            continue
        named.add(row.dcgm_name)
        ours = "label" if isinstance(known, LabelField) else known.kind
        if row.kind != ours:
            out.retyped.append(f"{row.dcgm_name} (file: {row.kind}, exported: {ours})")
    out.fields = tuple(f for f in catalog.FIELDS if f.dcgm_name in named)
    out.labels = tuple(lf for lf in catalog.LABELS if lf.dcgm_name in named)
    return out


def read(path: Path) -> CountersSelection:
    """Parse and select from the counters CSV at `path`; CountersFileError (one line) on any problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CountersFileError(f"cannot read counters file {path}: {err}") from None
    return select(parse_rows(text, str(path)))
