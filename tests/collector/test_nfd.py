"""Labels through Node Feature Discovery: the file, its rewrites, outages, and the example NodeFeatureRule."""

from __future__ import annotations

import logging
import math
import os
import re
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.registry import CollectorRegistry

from collector.nfd import (
    FILE_NAME,
    NfdCollector,
    NfdConfig,
    NfdLabeler,
    NodeLabels,
    feature_text,
    needs_rewrite,
    node_labels,
    risk_bucket,
    split_expiry,
    write_atomic,
)
from core.decisions import DECISIONS, worst
from core.service_client import GpuView, NodeView, ServiceUnavailable
from tests.core.test_service_client import TOKEN, closed_port, real_service
from tests.crd import crd_schema, unknown_fields
from tests.integration.conftest import require_module

ROOT = Path(__file__).resolve().parents[2]
RULE = ROOT / "deploy/examples/nfd-gpuhealth-rule.yaml"
CRD = ROOT / "tests/data/nfd-nodefeaturerule-crd.yaml"
T0 = datetime(2026, 12, 1, 11, 57, tzinfo=UTC)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # Kubernetes' own pattern
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def gpu(index: int | None, decision: str | None, risk: float | None) -> GpuView:
    return GpuView(uuid=f"GPU-{index}", gpu_index=index, decision=decision, risk=risk)


def node(*gpus: GpuView) -> NodeView:
    return NodeView("node-a", tuple(gpus))


# -- the pure parts ------------------------------------------------------------------------------


def test_file_text() -> None:
    view = node(gpu(0, "ok", 0.05), gpu(3, "demote", 0.74), gpu(5, "watch", 0.45), gpu(6, None, None))
    labels = node_labels(view)
    assert labels == NodeLabels("demote", 7, 3)
    assert feature_text(labels, datetime(2026, 12, 1, 12, 0, 0, 900_000, tzinfo=UTC)) == (
        "# +expiry-time=2026-12-01T12:00:00Z\n"
        "gpuhealth.io/decision=demote\n"
        "gpuhealth.io/risk-bucket=7\n"
        "gpuhealth.io/gpu=3\n"
    )


def test_ok_node_has_no_gpu_label() -> None:
    for view in (node(gpu(0, "ok", 0.12), gpu(1, None, None)), node()):
        text = feature_text(node_labels(view), T0)
        assert "gpuhealth.io/decision=ok\n" in text and "gpuhealth.io/gpu" not in text
    assert node_labels(node(gpu(0, "ok", 0.12))).risk_bucket == 1


def test_expiry_is_rfc3339_utc_from_any_zone() -> None:
    east = datetime(2026, 12, 1, 13, 0, tzinfo=UTC).astimezone(tz=None)
    text = feature_text(NodeLabels("ok", 0), east)
    stamp = text.splitlines()[0].removeprefix("# +expiry-time=")
    assert RFC3339_UTC.match(stamp) and stamp == "2026-12-01T13:00:00Z"
    assert split_expiry(text)[0] == datetime(2026, 12, 1, 13, tzinfo=UTC)


@pytest.mark.parametrize(
    ("risks", "bucket"),
    [
        ([], 0), ([None], 0), ([math.nan], 0), ([0.0], 0), ([0.0999], 0), ([0.1], 1), ([0.3], 3),
        ([0.6999], 6), ([0.7], 7), ([0.9], 9), ([0.9999], 9), ([1.0], 10), ([1.7], 10), ([-0.2], 0),
        ([0.2, None, 0.81, math.nan, 0.5], 8),
    ],
)  # fmt: skip
def test_risk_bucket_edges(risks: list[float | None], bucket: int) -> None:
    assert risk_bucket(risks) == bucket


def test_every_tenth_lands_in_its_own_bucket() -> None:
    """floor(10 × k/10) is k for every k: no tenth falls into the bucket below through rounding."""
    assert [risk_bucket([k / 10]) for k in range(11)] == list(range(11))
    assert [risk_bucket([k / 100]) for k in range(101)] == [k // 10 for k in range(101)]


def test_worst_decision() -> None:
    assert worst([]) == "ok"
    assert worst([None, None]) == "ok"
    assert worst(["watch", None, "ok"]) == "watch"
    assert worst(["demote", "rma", "drain", "watch"]) == "rma"
    assert worst(reversed(DECISIONS)) == "rma"
    for i, d in enumerate(DECISIONS):
        assert worst([*DECISIONS[:i], None, d]) == d
    with pytest.raises(ValueError, match="unknown decision 'broken'"):
        worst(["ok", "broken"])


def test_the_deciding_gpu() -> None:
    # The most severe decision wins over a higher risk; then the riskiest; then the lowest index.
    assert node(gpu(0, "demote", 0.95), gpu(4, "rma", 0.1)).worst_gpu() == gpu(4, "rma", 0.1)
    assert node(gpu(1, "drain", 0.2), gpu(2, "drain", 0.6), gpu(3, "drain", None)).worst_gpu() == gpu(2, "drain", 0.6)
    assert node(gpu(7, "watch", 0.4), gpu(2, "watch", 0.4)).worst_gpu() == gpu(2, "watch", 0.4)
    assert node(gpu(0, "ok", 0.2), gpu(1, None, None)).worst_gpu() is None
    assert node().worst_gpu() is None
    # A deciding GPU without an index (only ever scored, or an exporter without gpu/device labels) is unknown.
    assert node_labels(node(gpu(None, "drain", 0.4), gpu(1, "watch", 0.5))).lines()[2] == "gpuhealth.io/gpu=unknown"


def test_every_label_value_is_a_kubernetes_label_value() -> None:
    for d in DECISIONS:
        for bucket in range(11):
            for index in (None, 0, 7, 63, 1023, -1, 2**31 - 1):
                for line in NodeLabels(d, bucket, index).lines():
                    key, value = line.split("=", 1)
                    assert key.startswith("gpuhealth.io/") and len(key.split("/")[1]) <= 63
                    assert len(value) <= 63 and LABEL_VALUE.match(value), line
    with pytest.raises(ValueError, match="not a Kubernetes label value"):
        NodeLabels("bad value!", 0).lines()


# -- the file ------------------------------------------------------------------------------------


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    write_atomic(path, "a=1\n")
    write_atomic(path, "a=2\n")
    assert path.read_text() == "a=2\n"
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # nfd-worker need not run as our user


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / FILE_NAME
    write_atomic(path, "old\n")
    seen: list[str] = []

    def no_rename(src: Any, dst: Any) -> None:
        seen.append(Path(src).name)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "new\n")
    assert seen[0].startswith(".")  # written as a dot file: nfd-worker skips those
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]


def test_needs_rewrite() -> None:
    window = timedelta(minutes=3)
    labels = NodeLabels("watch", 4, 1)
    body = "".join(f"{line}\n" for line in labels.lines())
    current = feature_text(labels, T0 + window)
    assert needs_rewrite(None, body, T0, window)
    assert not needs_rewrite(current, body, T0, window)
    assert not needs_rewrite(current, body, T0 + window / 2 - timedelta(seconds=1), window)
    assert needs_rewrite(current, body, T0 + window / 2 + timedelta(seconds=1), window)
    assert needs_rewrite(current, body.replace("watch", "demote"), T0, window)
    assert needs_rewrite(body, body, T0, window)  # no expiry: never leave labels that cannot expire
    assert needs_rewrite("# +expiry-time=soon\n" + body, body, T0, window)


# -- the loop ------------------------------------------------------------------------------------


class Clock:
    def __init__(self, t: datetime = T0) -> None:
        self.t = t.timestamp()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Service:
    """What the fetch returns: a node, or an outage (raised as the client raises it)."""

    def __init__(self, view: NodeView) -> None:
        self.view = view
        self.down: Exception | None = None

    def __call__(self) -> NodeView:
        if self.down is not None:
            raise self.down
        return self.view


def labeler(tmp_path: Path, service: Service, clock: Clock, interval_s: float = 60.0) -> NfdLabeler:
    cfg = NfdConfig(tmp_path, "http://gpuhealth:8080", "node-a", interval_s=interval_s)
    return NfdLabeler(cfg, fetch=service, clock=clock)


def test_unchanged_labels_are_not_rewritten(tmp_path: Path) -> None:
    svc, clock = Service(node(gpu(0, "demote", 0.72))), Clock()
    lab = labeler(tmp_path, svc, clock)
    assert lab.run_once()
    path = tmp_path / FILE_NAME
    first = path.read_text()
    inode = path.stat().st_ino
    assert first.startswith("# +expiry-time=2026-12-01T12:00:00Z\n")  # now + 3 × 60 s
    clock.advance(60)
    svc.view = node(gpu(0, "demote", 0.75))  # the same bucket and decision: the same file
    assert lab.run_once()
    assert path.read_text() == first and path.stat().st_ino == inode
    assert lab.writes == 1 and lab.last_success == clock()


@pytest.mark.parametrize("index", [-1, None])
def test_a_gpu_of_unknown_index_is_labelled_unknown(tmp_path: Path, index: int | None) -> None:
    """Issue 55.3: an index of -1 (an exporter that sends neither gpu nor device) raised, and counted nothing."""
    lab = labeler(tmp_path, Service(node(gpu(index, "drain", 0.4), gpu(1, "watch", 0.5))), Clock())
    assert lab.run_once()
    assert (tmp_path / FILE_NAME).read_text().endswith("gpuhealth.io/decision=drain\ngpuhealth.io/risk-bucket=5\n"
                                                      "gpuhealth.io/gpu=unknown\n")  # fmt: skip


def test_a_value_that_makes_no_label_is_a_counted_error(tmp_path: Path) -> None:
    svc, clock = Service(node(gpu(0, "watch", 0.4))), Clock()
    lab = labeler(tmp_path, svc, clock)
    assert lab.run_once()
    before = (tmp_path / FILE_NAME).read_text()
    svc.view = node(gpu(0, "broken!", 0.4))  # no decision gpuhealth knows: no label value
    assert not lab.run_once()
    assert lab.stats().errors == {"service": 1, "write": 0}
    assert (tmp_path / FILE_NAME).read_text() == before


def test_changed_labels_are_written_at_once(tmp_path: Path) -> None:
    svc, clock = Service(node(gpu(0, "watch", 0.4))), Clock()
    lab = labeler(tmp_path, svc, clock)
    lab.run_once()
    clock.advance(5)
    svc.view = node(gpu(0, "watch", 0.4), gpu(2, "drain", 0.3))
    lab.run_once()
    assert (tmp_path / FILE_NAME).read_text() == (
        "# +expiry-time=2026-12-01T12:00:05Z\ngpuhealth.io/decision=drain\ngpuhealth.io/risk-bucket=4\n"
        "gpuhealth.io/gpu=2\n"
    )
    assert lab.writes == 2


def test_expiry_is_refreshed_when_less_than_half_is_left(tmp_path: Path) -> None:
    svc, clock = Service(node(gpu(0, "ok", 0.1))), Clock()
    lab = labeler(tmp_path, svc, clock)
    lab.run_once()
    path = tmp_path / FILE_NAME
    clock.advance(60)  # 120 s of 180 left: no rewrite
    lab.run_once()
    assert lab.writes == 1
    clock.advance(60)  # 60 s of 180 left: rewrite with a new expiry
    lab.run_once()
    assert lab.writes == 2
    assert split_expiry(path.read_text())[0] == T0 + timedelta(seconds=120 + 180)
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]


def test_a_file_someone_removed_or_edited_is_written_again(tmp_path: Path) -> None:
    svc, clock = Service(node(gpu(0, "rma", 0.9))), Clock()
    lab = labeler(tmp_path, svc, clock)
    lab.run_once()
    path = tmp_path / FILE_NAME
    path.unlink()
    lab.run_once()
    assert "gpuhealth.io/decision=rma" in path.read_text()
    path.write_text(path.read_text().replace("rma", "ok"))
    lab.run_once()
    assert "gpuhealth.io/decision=rma" in path.read_text() and lab.writes == 3


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_service_down_keeps_the_file_and_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc, clock = Service(node(gpu(3, "demote", 0.72))), Clock()
    lab = labeler(tmp_path, svc, clock)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NfdCollector(lab))
    assert sample(registry, "gpuhealth_nfd_last_success_timestamp_seconds") == 0.0
    assert sample(registry, "gpuhealth_nfd_errors_total", stage="service") == 0.0
    lab.run_once()
    path = tmp_path / FILE_NAME
    before = path.read_text()

    svc.down = ServiceUnavailable("http://gpuhealth:8080/v1/nodes/node-a: cannot connect", url="x")
    with caplog.at_level(logging.DEBUG, logger="collector.nfd"):
        for _ in range(3):
            clock.advance(60)  # the last two rounds are past the half-life: an up service would rewrite
            assert not lab.run_once()
    assert path.read_text() == before  # kept: it expires by itself at 12:00
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage
    assert "cannot connect" in warnings[0].getMessage()
    assert "keeping the last labels (they expire at 2026-12-01T12:00:00Z)" in warnings[0].getMessage()
    assert sample(registry, "gpuhealth_nfd_errors_total", stage="service") == 3.0
    assert sample(registry, "gpuhealth_nfd_errors_total", stage="write") == 0.0
    assert sample(registry, "gpuhealth_nfd_last_success_timestamp_seconds") == T0.timestamp()

    caplog.clear()
    svc.down = None
    with caplog.at_level(logging.INFO, logger="collector.nfd"):
        assert lab.run_once()
        svc.down = ServiceUnavailable("HTTP 503", url="x")
        lab.run_once()  # a new outage warns again
    assert [r.levelname for r in caplog.records] == ["INFO", "WARNING"]
    assert sample(registry, "gpuhealth_nfd_writes_total") == 2.0
    assert sample(registry, "gpuhealth_nfd_last_success_timestamp_seconds") == clock()


def test_unwritable_directory_counts_as_a_write_error(tmp_path: Path) -> None:
    gone = tmp_path / "features.d"
    gone.mkdir()
    lab = NfdLabeler(NfdConfig(gone, "http://x", "node-a"), fetch=Service(node(gpu(0, "ok", 0.0))), clock=Clock())
    gone.rmdir()
    assert not lab.run_once()
    assert lab.stats().errors == {"service": 0, "write": 1}


def test_the_loop_against_the_real_service(tmp_path: Path) -> None:
    """start/stop on its thread, asking `gpuhealth serve`'s API, closed reads and all."""
    features = tmp_path / "features.d"
    features.mkdir()
    with real_service(tmp_path, token=TOKEN, read_open=False) as url:
        lab = NfdLabeler(NfdConfig(features, url, "node-a", token=TOKEN, interval_s=0.05))
        lab.start()
        try:
            for _ in range(200):
                if lab.stats().last_success is not None:
                    break
                time.sleep(0.02)
        finally:
            lab.stop()
    lines = (features / FILE_NAME).read_text().splitlines()
    assert lines[1:] == ["gpuhealth.io/decision=drain", "gpuhealth.io/risk-bucket=7", "gpuhealth.io/gpu=2"]
    assert lab.stats().errors == {"service": 0, "write": 0}


def test_an_unreachable_service_writes_nothing(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    lab = NfdLabeler(NfdConfig(tmp_path, url, "node-a", timeout_s=1.0))
    assert not lab.run_once()
    assert list(tmp_path.iterdir()) == []
    assert lab.stats().errors["service"] == 1


# -- the example NodeFeatureRule -----------------------------------------------------------------


def _schema(version: str) -> dict[str, Any]:
    return crd_schema(CRD, "nfd.k8s-sigs.io", "NodeFeatureRule", version)


def test_example_rule_is_a_valid_nodefeaturerule() -> None:
    jsonschema_rs = require_module("jsonschema_rs")
    rule = yaml.safe_load(RULE.read_text())
    group, version = rule["apiVersion"].split("/")
    assert (group, rule["kind"]) == ("nfd.k8s-sigs.io", "NodeFeatureRule")
    schema = _schema(version)
    validator = jsonschema_rs.validator_for(schema)
    errors = [e.message for e in validator.iter_errors(rule)]
    assert errors == []
    assert unknown_fields(rule, schema) == []
    # The validator has teeth: a wrong operator and a missing key are refused.
    bad = yaml.safe_load(RULE.read_text())
    bad["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["gpuhealth.io/decision"]["op"] = "Equals"
    del bad["spec"]["rules"][1]["taints"][0]["key"]
    assert len(list(validator.iter_errors(bad))) == 2
    typo = yaml.safe_load(RULE.read_text())
    typo["spec"]["rules"][0]["taint"] = typo["spec"]["rules"][0].pop("taints")
    assert unknown_fields(typo, schema) == [".spec.rules[0].taint"]


def test_example_rule_says_what_the_readme_says() -> None:
    """demote: taint demoted + label interruptible-only; drain and rma: taint drain; on our local.label."""
    rules = yaml.safe_load(RULE.read_text())["spec"]["rules"]
    effects: dict[str, tuple[list[str], dict[str, str]]] = {}
    for r in rules:
        (term,) = r["matchFeatures"]
        assert term["feature"] == "local.label"  # the local source's labels (NFD's "available features")
        (expr,) = term["matchExpressions"].items()
        key, match = expr
        assert key == "gpuhealth.io/decision" and match["op"] == "In"
        assert set(match["value"]) <= set(DECISIONS)
        taints = [f"{t['key']}={t['value']}:{t['effect']}" for t in r.get("taints", [])]
        for d in match["value"]:
            effects[d] = (taints, r.get("labels", {}))
    assert effects == {
        "demote": (["gpuhealth.io/demoted=true:NoSchedule"], {"gpuhealth.io/interruptible-only": "true"}),
        "drain": (["gpuhealth.io/drain=true:NoSchedule"], {}),
        "rma": (["gpuhealth.io/drain=true:NoSchedule"], {}),
    }
