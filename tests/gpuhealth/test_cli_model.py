"""`gpuhealth model list|show|promote` and `gpuhealth train --db`: outputs and one-line errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhealth.cli import app
from store import Store
from tests.service.tiny_model import tiny_model

runner = CliRunner()
AT = datetime(2026, 12, 1, 12, tzinfo=UTC)
CARD = {
    "trained_on": {"fleet": {"gpus": 64, "span": ["2026-10-01 00:00:00+00:00", "2026-11-16 00:00:00+00:00"]}},
    "holdout": {"days": 14, "start": "2026-11-16T00:00:00+00:00", "end": "2026-11-30T00:00:00+00:00", "gpus": 64,
                "failures": {"ecc": 4, "pcie": 1}},
    "promotion": None,
}  # fmt: skip


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'models.db'}"


def error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_list_and_show(url: str) -> None:
    r = runner.invoke(app, ["model", "list", "--db", url])
    assert r.exit_code == 0 and "no stored models" in r.stderr
    store = Store.open(url)
    try:
        a = store.models.put(b"first", CARD, created_at=AT)["version"]
        b = store.models.put(b"second", {**CARD, "promotion": {"promoted": False, "refusals": ["recall_ecc worse"]}},
                            created_at=AT.replace(hour=13))["version"]  # fmt: skip
        store.models.activate(a, AT)
    finally:
        store.close()
    listing = json.loads(runner.invoke(app, ["model", "list", "--db", url, "--format", "json"]).stdout)
    assert [(m["version"], m["active"], m["promotion"]) for m in listing] == [
        (b, False, "refused: recall_ecc worse"), (a, True, "not tried")]  # fmt: skip
    assert listing[0]["holdout_failures"] == "ecc 4, pcie 1" and listing[0]["fleet_span"] == "2026-10-01 .. 2026-11-16"
    table = runner.invoke(app, ["model", "list", "--db", url]).stdout
    assert a in table and b in table
    shown = json.loads(runner.invoke(app, ["model", "show", "--db", url]).stdout)
    assert shown["version"] == a and shown["active"] and shown["card"]["holdout"]["days"] == 14
    assert "data" not in shown
    assert json.loads(runner.invoke(app, ["model", "show", b, "--db", url]).stdout)["version"] == b


def test_errors_are_one_line(url: str) -> None:
    assert error_line(["model", "show", "nope", "--db", url]).startswith("error: model nope not found")
    assert error_line(["model", "promote", "nope", "--db", url]).startswith("error: model nope not found")
    r = runner.invoke(app, ["model", "show", "--db", url])
    assert r.exit_code == 1 and "no stored model is active" in r.stderr
    assert "either --db" in error_line(["train", "--db", url, "--history", "h.parquet"])
    assert "or --db URL" in error_line(["train", "--history", "h.parquet"])
    assert "--history-days 10 leaves nothing to train on after the 14 held-out days" in error_line(
        ["train", "--db", url, "--history-days", "10"]
    )
    r = runner.invoke(app, ["train", "--db", url, "--prior-fleets", "0"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: ") and "holds no history to train on" in r.stderr


def test_promote_refusal_exits_1_and_force_activates(url: str) -> None:
    store = Store.open(url)
    try:
        broken = store.models.put(b"not even a model", {"holdout": None}, created_at=AT)["version"]
        v = store.models.put(tiny_model("cli").to_bytes(), {"holdout": None}, created_at=AT)["version"]
    finally:
        store.close()
    assert "not a gpuhealth model file" in error_line(["model", "promote", broken, "--db", url, "--force"])
    r = runner.invoke(app, ["model", "promote", v, "--db", url])
    assert r.exit_code == 1, r.stderr
    assert f"refused: model {v} stays inactive" in r.stderr and "no holdout slice" in r.stderr
    r = runner.invoke(app, ["model", "promote", v, "--db", url, "--force"])
    assert r.exit_code == 0, r.stderr
    assert f"FORCED: model {v} is active although promote refused it" in " ".join(r.stderr.split())


def test_add_stores_a_model_file_as_a_candidate_and_says_what_promote_will_judge(url: str, tmp_path: Path) -> None:
    from simulator.fleet import SimConfig
    from simulator.run import simulate

    path = tiny_model("release").save(tmp_path / "release.skops")
    assert "holds no history" in error_line(["model", "add", str(path), "--db", url])
    assert "no such model file" in error_line(["model", "add", str(tmp_path / "none.skops"), "--db", url])
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=4, interval_s=3600)
    store = Store.open(url)
    try:
        store.samples.ingest(frame)
    finally:
        store.close()
    r = runner.invoke(app, ["model", "add", str(path), "--db", url, "--holdout-days", "2"])
    assert r.exit_code == 0, r.stderr
    version = r.stdout.strip()
    said = " ".join(r.stderr.split())
    assert f"stored model {version} (inactive) from {path}" in said and "2 GPUs, failures none" in said
    assert f"next: gpuhealth model promote {version}" in said
    listing = json.loads(runner.invoke(app, ["model", "list", "--db", url, "--format", "json"]).stdout)
    assert [(m["version"], m["active"], m["promotion"]) for m in listing] == [(version, False, "not tried")]


def test_prune_lists_what_goes_and_keeps_the_active_model(url: str) -> None:
    store = Store.open(url)
    try:
        made = [store.models.put(bytes([i]) * 2_000_000, CARD, created_at=AT.replace(hour=i))["version"]
                for i in range(4)]  # fmt: skip
        store.models.activate(made[0], AT)
    finally:
        store.close()
    r = runner.invoke(app, ["model", "prune", "--keep", "1", "--dry-run", "--db", url])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [f"would delete {v} (created 2026-12-01 {h:02d}:00, 2.0 MB)" for v, h in
                                     ((made[2], 2), (made[1], 1))]  # fmt: skip
    assert "would delete 2 model(s), 4.0 MB" in r.stderr
    r = runner.invoke(app, ["model", "prune", "--keep", "1", "--db", url])
    assert r.exit_code == 0 and r.stdout.startswith(f"deleted {made[2]}")
    listing = json.loads(runner.invoke(app, ["model", "list", "--db", url, "--format", "json"]).stdout)
    assert [m["version"] for m in listing] == [made[3], made[0]]
    assert error_line(["model", "prune", "--keep", "0", "--db", url]).startswith("error: keep must be a whole number")


def test_promote_on_a_fleet_younger_than_the_holdout_is_a_refusal_not_a_traceback(url: str, tmp_path: Path) -> None:
    from simulator.fleet import SimConfig
    from simulator.run import simulate

    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=4, interval_s=3600)
    store = Store.open(url)
    try:
        store.samples.ingest(frame)
    finally:
        store.close()
    path = tiny_model("young").save(tmp_path / "young.skops")
    r = runner.invoke(app, ["model", "add", str(path), "--db", url])  # the default 14-day holdout
    assert r.exit_code == 0, r.stderr
    version = r.stdout.strip()
    r = runner.invoke(app, ["model", "promote", version, "--db", url])
    said = " ".join(r.stderr.split())
    assert r.exit_code == 1 and r.exception is not None and isinstance(r.exception, SystemExit), r.stderr
    assert f"refused: model {version} stays inactive" in said and "cannot be scored on this fleet's history" in said
    r = runner.invoke(app, ["model", "promote", version, "--db", url, "--force"])
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"FORCED: model {version} is active although promote refused it" in " ".join(r.stderr.split())


@pytest.mark.parametrize(
    ("meta", "needle"),
    [({"training_sets": [1, 2]}, "the model's metadata is malformed: training_sets[0] is an int, not an object"),
     (["not", "a", "mapping"], "a skops file, but not a gpuhealth model (its metadata is a list, not an object)")],
    ids=["training-sets", "meta"],
)  # fmt: skip
def test_add_of_a_file_with_malformed_metadata_is_a_one_line_error(
    url: str, tmp_path: Path, meta: Any, needle: str
) -> None:
    from simulator.fleet import SimConfig
    from simulator.run import simulate

    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=2), days=3, interval_s=3600)
    store = Store.open(url)
    try:
        store.samples.ingest(frame)
    finally:
        store.close()
    model = tiny_model("odd")
    model.meta = meta if isinstance(meta, list) else {**model.meta, **meta}
    path = model.save(tmp_path / "odd.skops")
    line = error_line(["model", "add", str(path), "--db", url])
    assert "odd.skops" in line and needle in line
