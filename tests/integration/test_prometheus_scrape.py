"""A real Prometheus scrapes a real `gpuhealth collect --backend sim`; the DCGM dashboard works on it.

Compatibility with dcgm-exporter is only proven where its consumers look: Prometheus's
parser (types, names, labels) and the queries of NVIDIA's Grafana dashboard 12239.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core import catalog
from simulator.models import DEFAULT_MODEL, get_model

if TYPE_CHECKING:  # conftest is pytest's to import; the names are only for annotations
    from tests.integration.conftest import PromClient, Service, SimNode

pytestmark = pytest.mark.integration

DASHBOARD_QUERIES = Path(__file__).parent / "data" / "dcgm_dashboard_12239_queries.txt"
SCRAPE_DEADLINE_S = 30.0
GPU_LABELS = ("gpu", "UUID", "device", "modelName", "pci_bus_id", "Hostname")
XID_ECC_CODES = {"48", "63", "64", "92", "95"}
"""XIDs the simulator raises for an ECC fault: DBE, row remap, remap failure, SBE storm, uncontained."""


@dataclass(frozen=True)
class DashboardQuery:
    """One query of the dashboard: a panel target or a template-variable query."""

    title: str
    expr: str


def load_dashboard_queries(path: Path = DASHBOARD_QUERIES) -> list[DashboardQuery]:
    """The queries of tests/integration/data/dcgm_dashboard_12239_queries.txt, in file order."""
    out: list[DashboardQuery] = []
    title = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("# panel:"):
            title = line.removeprefix("# panel:").strip()
        elif line and not line.startswith("#"):
            out.append(DashboardQuery(title or f"line {len(out) + 1}", line))
            title = ""
    return out


QUERIES = load_dashboard_queries()
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")


def grafana_regex_escape(value: str) -> str:
    """A single selected value as Grafana writes it into `=~"..."` (regex-escaped, PromQL-quoted)."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace $var / ${var} as Grafana would; an unknown variable is an error (new dashboard)."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value in this test; add it")
        return values[name]

    return _VARIABLE.sub(repl, expr)


def expected_series(expr: str, gpus: int) -> int:
    """How many series a panel query returns over `gpus` GPUs: one each unless it aggregates them away."""
    outer = re.match(r"(sum|avg|min|max|count)\s*\(", expr)
    if outer is None:
        return gpus  # a plain selector (times a constant): one series per GPU
    grouping = re.search(r"\)\s*by\s*\(([^()]*)\)$", expr)
    if grouping is None:
        return 1
    labels = {label.strip() for label in grouping.group(1).split(",")}
    return gpus if labels & {"gpu", "UUID"} else 1


def values_of(result: list[dict[str, Any]]) -> list[float]:
    """The sample values of an instant-query result."""
    return [float(r["value"][1]) for r in result]


@pytest.fixture(scope="module")
def scraped(prom: PromClient, sim_node: SimNode) -> PromClient:
    """The Prometheus client once Prometheus has scraped every GPU of the exporter."""
    prom.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == sim_node.gpus, SCRAPE_DEADLINE_S)
    return prom


@pytest.fixture(scope="module")
def target(gpuhealth_exporter: Service) -> str:
    """The exporter's host:port, which is Prometheus's `instance` label for it."""
    return gpuhealth_exporter.url.removeprefix("http://")


def test_gpu_temp_has_one_series_per_gpu_with_dcgm_labels(prom: PromClient, sim_node: SimNode) -> None:
    result = prom.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) >= sim_node.gpus, SCRAPE_DEADLINE_S)
    assert len(result) == sim_node.gpus, [r["metric"] for r in result]
    metrics = [r["metric"] for r in result]
    for m in metrics:
        missing = [label for label in GPU_LABELS if not m.get(label)]
        assert not missing, f"series {m} lacks labels {missing}"
        assert m["device"] == f"nvidia{m['gpu']}"
        assert m["Hostname"] == sim_node.hostname
        assert m["job"] == "gpu"
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", m["UUID"]), m["UUID"]
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]", m["pci_bus_id"]), m
    assert sorted(int(m["gpu"]) for m in metrics) == list(range(sim_node.gpus))
    assert len({m["UUID"] for m in metrics}) == sim_node.gpus
    assert len({m["pci_bus_id"] for m in metrics}) == sim_node.gpus
    assert {m["modelName"] for m in metrics} == {DEFAULT_MODEL}
    assert all(10.0 <= v <= 100.0 for v in values_of(result)), values_of(result)


@pytest.mark.parametrize("selection", ["All", "one GPU"])
@pytest.mark.parametrize("query", QUERIES, ids=[q.title for q in QUERIES])
def test_dcgm_dashboard_query_returns_data(
    scraped: PromClient, sim_node: SimNode, target: str, query: DashboardQuery, selection: str
) -> None:
    all_gpus = selection == "All"
    # "All" without a custom all-value makes Grafana send a regex of every value; `.*`
    # matches the same series. "one GPU" is a single selection, regex-escaped the way
    # Grafana's Prometheus datasource escapes it.
    values = (
        {"Hostname": ".*", "instance": ".*", "gpu": ".*"}
        if all_gpus
        else {
            "Hostname": grafana_regex_escape(sim_node.hostname),
            "instance": grafana_regex_escape(target),
            "gpu": sim_node.faulty_gpu,
        }
    )
    expr = substitute(query.expr, values)
    variable = _LABEL_VALUES.match(expr)
    if variable:
        params = {"match[]": variable["selector"]} if variable["selector"] else None
        got = set(scraped.api(f"/api/v1/label/{variable['label']}/values", params))
        want = {
            "Hostname": {sim_node.hostname},
            "gpu": {str(i) for i in range(sim_node.gpus)},
            "instance": {target},
        }[variable["label"]]
        assert got == want, f"{query.title}: {expr} gave {sorted(got)}"
        return
    result = scraped.query(expr)
    assert result, f"{query.title}: {expr} returned no data"
    want_series = expected_series(expr, sim_node.gpus if all_gpus else 1)
    assert len(result) == want_series, f"{query.title}: {expr} -> {result}"
    assert all(math.isfinite(v) for v in values_of(result)), f"{query.title}: {expr} -> {result}"


def test_profiling_and_framebuffer_series(scraped: PromClient, sim_node: SimNode) -> None:
    active = scraped.query("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert len(active) == sim_node.gpus
    assert all(0.0 <= v <= 1.0 for v in values_of(active)), "a DCGM_FI_PROF_* ratio lies in [0, 1]"
    # Used, free and reserved come from the same sample (nvmlMemory_v2), so they add up to the framebuffer.
    total = scraped.query("DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED")
    assert len(total) == sim_node.gpus
    assert values_of(total) == [get_model(DEFAULT_MODEL).fb_total_mib] * sim_node.gpus
    # dcgm-exporter's driver-version label reaches Prometheus on every GPU's series.
    by_driver = scraped.query("count by (DCGM_FI_DRIVER_VERSION) (DCGM_FI_PROF_PCIE_TX_BYTES)")
    assert [(r["metric"].get("DCGM_FI_DRIVER_VERSION"), r["value"][1]) for r in by_driver] == [
        ("570.124.06", str(sim_node.gpus))
    ]


def test_xid_counter_and_self_health(scraped: PromClient, sim_node: SimNode) -> None:
    xids = scraped.wait_for("gpuhealth_xid_errors_total", bool, SCRAPE_DEADLINE_S)
    assert {r["metric"]["gpu"] for r in xids} == {sim_node.faulty_gpu}, [r["metric"] for r in xids]
    assert {r["metric"]["xid"] for r in xids} <= XID_ECC_CODES
    assert all(v >= 1 for v in values_of(xids))
    assert all(r["metric"]["UUID"] for r in xids), "XID counts carry the GPU labels"
    last_xid = scraped.query("DCGM_FI_DEV_XID_ERRORS != 0")
    assert [r["metric"]["gpu"] for r in last_xid] == [sim_node.faulty_gpu]

    assert len(scraped.query('gpuhealth_collector_success{collector="sample"} == 1')) == 1
    assert len(scraped.query('gpuhealth_collector_success{collector="xid"} == 1')) == 1
    assert len(scraped.query(f"gpuhealth_gpus == {sim_node.gpus}")) == 1
    assert len(scraped.query("gpuhealth_gpu_lost == 0")) == sim_node.gpus
    assert len(scraped.query('gpuhealth_collector_duration_seconds{collector="sample"} >= 0')) == 1
    age = values_of(scraped.query("gpuhealth_sample_age_seconds"))
    assert len(age) == 1 and 0.0 <= age[0] < 3.0, f"sampling every 1s, yet the snapshot is {age}s old"


def test_target_up_and_scraped_without_errors(scraped: PromClient, target: str, gpuhealth_exporter: Service) -> None:
    up = scraped.query('up{job="gpu"}')
    assert [(r["metric"]["instance"], r["value"][1]) for r in up] == [(target, "1")]

    active = scraped.api("/api/v1/targets")["activeTargets"]
    targets = [t for t in active if t["labels"]["job"] == "gpu"]
    assert len(targets) == 1
    assert targets[0]["health"] == "up", targets[0]
    assert targets[0]["lastError"] == "", targets[0]["lastError"]

    # Every family the exporter serves reaches Prometheus with its type (and, for catalogue
    # fields, the catalogue's kind and help): what Grafana and recording rules see.
    exposed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", gpuhealth_exporter.get("/metrics"), re.MULTILINE))
    metadata = scraped.api("/api/v1/targets/metadata", {"match_target": '{job="gpu"}'})
    seen = {m["metric"]: m["type"] for m in metadata}
    assert {name: seen.get(name) for name in exposed} == exposed
    by_metric = {f.metric_name: f for f in catalog.FIELDS}
    helps = {m["metric"]: m["help"] for m in metadata}
    for name in exposed.keys() & by_metric.keys():
        assert (seen[name], helps[name]) == (by_metric[name].kind, by_metric[name].help), name
    # Counters under bare DCGM names (no _total) are the reason render() exists: check they
    # arrive typed as counters, as dcgm-exporter's do.
    assert seen["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "counter"
    assert seen["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == "counter"
    assert seen["gpuhealth_xid_errors_total"] == "counter"
    assert seen["DCGM_FI_DEV_GPU_TEMP"] == "gauge"
    assert seen["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"  # as dcgm-exporter types it (a rate)
    assert seen["DCGM_FI_PROF_PCIE_TX_BYTES"] == "gauge"

    # Prometheus counts the samples it dropped: duplicate series, out of order, out of bounds.
    dropped = {
        name: float(value)
        for name, value in re.findall(
            r"^(prometheus_target_scrapes_(?:sample_duplicate_timestamp|sample_out_of_order"
            r"|sample_out_of_bounds|exceeded_sample_limit)_total) (\S+)$",
            scraped.own_metrics(),
            re.MULTILINE,
        )
    }
    assert len(dropped) == 4, f"Prometheus's own drop counters not found: {sorted(dropped)}"
    assert all(v == 0 for v in dropped.values()), dropped
