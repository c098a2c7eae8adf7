"""Generated dashboards: current (golden files), stable JSON, complete panels and variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from alerts import config as alerts_config
from core import kernel_log
from core import remediation_metrics as rm
from dashboards import all_expressions, build, common, resolve

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS = build.rendered()


def test_generated_files_are_current() -> None:
    stale = build.stale(REPO_ROOT)
    assert stale == [], f"out of date: {stale}; run `gpuhealth dashboards build`"


@pytest.mark.parametrize("name", list(build.DASHBOARDS))
def test_json_is_stable_and_sorted(name: str) -> None:
    text = (REPO_ROOT / build.GENERATED_DIR / f"{name}.json").read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert build.to_json(build.DASHBOARDS[name]()) == build.to_json(build.DASHBOARDS[name]())


@pytest.mark.parametrize("name", list(build.DASHBOARDS))
def test_dashboard_basics(name: str) -> None:
    model = MODELS[name]
    assert model["uid"] == name
    assert model["schemaVersion"] >= 39
    variables = model["templating"]["list"]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    for var in variables[1:]:
        assert var["datasource"] == common.DS, var["name"]


@pytest.mark.parametrize("name", list(build.DASHBOARDS))
def test_every_panel_queries_the_datasource_variable(name: str) -> None:
    ids = set()
    cells: set[tuple[int, int]] = set()
    for p in build.panels(MODELS[name]):
        title = p["title"]
        assert p["description"], f"{title}: no description (docs/dashboards.md is made of them)"
        if p["type"] == "row":  # a row's header queries nothing; its panels follow it
            assert p["targets"] == [] and p["gridPos"]["w"] == 24, title
        else:
            assert p["datasource"] == common.DS, title
            exprs = [tg["expr"] for tg in p["targets"] if tg["expr"].strip()]
            assert exprs, f"{title}: no query"
            assert all(tg["datasource"] == common.DS for tg in p["targets"]), title
            assert len({tg["refId"] for tg in p["targets"]}) == len(p["targets"]), title
        assert p["id"] not in ids
        ids.add(p["id"])
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, title
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{title} overlaps another panel"
        cells |= mine


def _titles(name: str) -> set[str]:
    return {p["title"] for p in build.panels(MODELS[name])}


def test_fleet_panels() -> None:
    titles = _titles("gpuhealth-fleet")
    for t in ("GPUs by decision", "Top-risk GPUs", "Risk by node", "Failures and RMAs recorded", "Alerts firing"):
        assert t in titles
    panel = {p["title"]: p for p in build.panels(MODELS["gpuhealth-fleet"])}
    assert panel["Risk by node"]["type"] == "heatmap"
    assert any("gpuhealth_decision_reasons_info" in tg["expr"] for tg in panel["Top-risk GPUs"]["targets"])


def test_fleet_remediation_row() -> None:
    panels = list(build.panels(MODELS["gpuhealth-fleet"]))
    row = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == "Remediations")
    after = {p["title"]: p for p in panels[row + 1 :]}
    exprs = {title: [tg["expr"] for tg in p["targets"]] for title, p in after.items()}
    assert exprs["Remediations stuck"] == [f"sum(max by (remedy, stage) ({rm.STUCK})) or vector(0)"]
    assert exprs["Remediations open by stage"] == [f"max by (remedy, stage) ({rm.OPEN})"]
    assert exprs["Remediations ended: returned vs rma"] == [f"sum by (remedy, result) (increase({rm.TOTAL}[1h]))"]
    quantiles = exprs["Time to return to service"]
    assert [q.split(",")[0] for q in quantiles] == ["histogram_quantile(0.5", "histogram_quantile(0.9"]
    assert all(f"sum by (le, remedy) (increase({rm.SECONDS}_bucket[1d]))" in q for q in quantiles)
    assert after["Time to return to service"]["fieldConfig"]["defaults"]["unit"] == "s"


def test_gpu_panels_and_variables() -> None:
    model = MODELS["gpuhealth-gpu"]
    assert [v["name"] for v in model["templating"]["list"]] == ["datasource", "Hostname", "gpu", "UUID"]
    titles = _titles("gpuhealth-gpu")
    for t in (
        "Temperatures", "Power", "Clocks", "Throttle reasons", "ECC errors", "Remapped rows and retired pages",
        "PCIe replays", "PCIe link width and generation", "XID events", "Probe results", "Risk per mode",
    ):  # fmt: skip
        assert t in titles
    temps = next(p for p in build.panels(model) if p["title"] == "Temperatures")
    steps = temps["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s.get("value") for s in steps] == [None, 85, 95]  # the base step has no value
    for p in build.panels(model):
        for tg in p["targets"]:
            assert 'UUID="$UUID"' in tg["expr"], f"{p['title']}: query not limited to the chosen GPU"


def test_node_panels_are_per_host() -> None:
    for p in build.panels(MODELS["gpuhealth-node"]):
        for tg in p["targets"]:
            assert 'Hostname="$Hostname"' in tg["expr"], p["title"]


def test_node_kernel_log_panel() -> None:
    panel = next(p for p in build.panels(MODELS["gpuhealth-node"]) if p["title"] == "Kernel log: XIDs and SXIDs (1 h)")
    exprs = [tg["expr"] for tg in panel["targets"]]
    assert exprs == [
        f'sum by (gpu, err_code, err_msg) (increase({kernel_log.XID}{{Hostname="$Hostname"}}[1h]))',
        f'sum by (switch, err_code, severity) (increase({kernel_log.SXID}{{Hostname="$Hostname"}}[1h]))',
    ]


def test_collector_selector_matches_the_alerts() -> None:
    assert common.COLLECTOR_SELECTOR == alerts_config.COLLECTOR_SELECTOR


def test_all_expressions_and_resolve() -> None:
    exprs = all_expressions()
    n_targets = sum(len(p["targets"]) for m in MODELS.values() for p in build.panels(m))
    assert len([w for w, _ in exprs if "/var:" not in w]) == n_targets
    where = dict(exprs)
    assert where["gpuhealth-gpu/var:UUID"] == 'gpuhealth_gpu_lost{Hostname="$Hostname", gpu="$gpu"}'
    got = resolve('rate(x{UUID="$UUID", Hostname=~"${Hostname}"}[$__rate_interval])', {"UUID": "GPU-1"})
    assert got == 'rate(x{UUID="GPU-1", Hostname=~".*"}[5m])'


def test_docs_describe_every_panel() -> None:
    text = (REPO_ROOT / build.DOC_PATH).read_text()
    for model in MODELS.values():
        for p in build.panels(model):
            assert f"| {p['title']} |" in text
    assert "datasource" in text and "Import" in text


def test_cli_build_and_check(tmp_path: Path) -> None:
    from gpuhealth.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["dashboards", "build", "--root", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["dashboards", "build", "--check", "--root", str(tmp_path)]).exit_code == 0
    target = tmp_path / build.GENERATED_DIR / "gpuhealth-node.json"
    data: dict[str, Any] = json.loads(target.read_text())
    data["title"] = "edited"
    target.write_text(json.dumps(data))
    res = runner.invoke(app, ["dashboards", "build", "--check", "--root", str(tmp_path)])
    assert res.exit_code == 1 and "gpuhealth-node.json" in res.output
