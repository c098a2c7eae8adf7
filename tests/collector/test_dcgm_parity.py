"""Parity with dcgm-exporter: its own default counters file, unchanged, drives our exporter, and every
counter in it comes out under the same name and TYPE line, with its `label` rows on every series."""

from __future__ import annotations

import gzip
import re
import urllib.request
from pathlib import Path

from collector.backends.sim import SimBackend
from collector.run import build_collector
from core import counters_csv

COUNTERS = Path(__file__).resolve().parents[1] / "data" / "dcgm-exporter-default-counters.csv"
GPUS = 8


def _scrape(url: str) -> tuple[str | None, str]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})  # as Prometheus asks
    with urllib.request.urlopen(request, timeout=10) as r:
        encoding, raw = r.headers.get("Content-Encoding"), r.read()
    return encoding, (gzip.decompress(raw) if encoding == "gzip" else raw).decode()


def test_every_counter_of_dcgm_exporters_default_file_is_exported_alike() -> None:
    rows = counters_csv.parse_rows(COUNTERS.read_text(), str(COUNTERS))
    picked = counters_csv.select(rows)
    assert picked.unknown == [], "a counter of dcgm-exporter's defaults gpuhealth does not know"
    sim = SimBackend(nodes=1, gpus_per_node=GPUS, seed=3, step_s=10.0)
    running = build_collector(sim, picked.fields, 10.0, "127.0.0.1", 0, label_fields=picked.labels)
    running.server.start()
    try:
        for _ in range(2):
            running.sampler.sample_once()
        encoding, text = _scrape(f"http://127.0.0.1:{running.server.port}/metrics")
    finally:
        running.stop()
    assert encoding == "gzip"
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    series = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_")]
    labels = [r for r in rows if r.kind == "label"]
    assert labels, "the default file adds DCGM_FI_DRIVER_VERSION as a label"
    for row in rows:
        if row.kind == "label":
            continue
        assert types.get(row.dcgm_name) == row.kind, f"line {row.line}: {row.dcgm_name} not typed {row.kind}"
        mine = [ln for ln in series if ln.startswith(row.dcgm_name + "{")]
        # At most one per GPU; the simulator leaves a few memory-temperature sensors unread, as in the field.
        assert 0 < len(mine) <= GPUS, f"{row.dcgm_name}: {len(mine)} series for {GPUS} GPUs"
    for row in labels:
        assert row.dcgm_name not in types, "a label row is not a metric"
        want = f'{row.dcgm_name}="{sim.driver_version}"'
        assert all(want in ln for ln in series), f"{row.dcgm_name} missing from some series"
