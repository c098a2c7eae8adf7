from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collector.backends import factory
from collector.backends.base import BackendUnavailable, CommonOptions
from core import catalog
from gpuhealth.cli import app

runner = CliRunner()


def _gpuhealth(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuhealth.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert needle in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--backend", "foo"], "unknown backend 'foo'; choose one of auto, nvml, dcgm, sim, replay"),
        (["--backend", "replay"], "--backend replay needs --history FILE"),
        (["--backend", "replay", "--history", "/nonexistent/h.parquet"], "/nonexistent/h.parquet: no such file"),
        (["--backend", "sim", "--history", "h.parquet"], "--history needs --backend replay"),
        (["--backend", "sim", "--interval", "soon"], "invalid duration 'soon'"),
        (["--backend", "sim", "--listen", "x:99999"], "must be 0..65535"),
        (["--backend", "sim", "--fields", "gpu_temp_c,bogus"], "unknown field(s): bogus"),
        (["--backend", "sim", "--sim-fault", "1:melt"], "MODE one of ecc, thermal, pcie, offbus"),
        (["--backend", "sim", "--sim-fault", "99:ecc"], "the simulated fleet has GPUs 0..7"),
        (["--backend", "nvml", "--sim-fault", "1:ecc"], "--sim-fault needs --backend sim"),
        (["--backend", "sim", "--hostname-label", "host"], "Hostname or hostname"),
    ],
)
def test_bad_flags_give_one_line_errors(args: list[str], needle: str) -> None:
    _one_line_error(_gpuhealth("collect", *args), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--source", "prometheus"], "--source prometheus needs --prometheus URL"),
        (["--source", "pigeon"], "unknown --source 'pigeon': use local or prometheus"),
        (["--prometheus", "http://prom:9090"], "--prometheus is for --source prometheus"),
        (["--source", "prometheus", "--prometheus", "http://p:9090", "--backend", "sim"], "no local collector"),
        (["--source", "prometheus", "--prometheus", "http://p:9090", "--pull-step", "often"], "invalid duration"),
        (["--source", "prometheus", "--prometheus", "http://p:9090", "--pull-step", "1h", "--backfill", "1m"],
         "backfill must be at least one step"),
        (["--replica-id", "r1"], "--replica-id and --lease-seconds are for --source prometheus"),
        (["--source", "prometheus", "--prometheus", "http://p:9090", "--lease-seconds", "0"],
         "--lease-seconds must be positive"),
    ],
)  # fmt: skip
def test_bad_serve_source_flags_give_one_line_errors(args: list[str], needle: str, tmp_path: object) -> None:
    _one_line_error(_gpuhealth("serve", "--listen", "127.0.0.1:0", "--db", f"sqlite:///{tmp_path}/x.db", *args), needle)


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _one_line_error(
            _gpuhealth("collect", "--backend", "sim", "--listen", f"127.0.0.1:{port}"),
            "cannot listen",
        )


def test_bad_environment_setting_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_BACKEND", "quantum")
    result = runner.invoke(app, ["collect"])
    assert result.exit_code == 2
    assert "invalid GPUHEALTH_* setting" in result.output


def test_auto_without_gpu_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto tries DCGM then NVML and names the way out when neither loads."""
    tried: list[str] = []

    def unavailable(name: str):
        def make(**_: object) -> None:
            tried.append(name)
            raise BackendUnavailable(f"{name} missing")

        return make

    import collector.backends.dcgm as dcgm_mod
    import collector.backends.nvml as nvml_mod

    monkeypatch.setattr(dcgm_mod, "DcgmBackend", unavailable("dcgm"))
    monkeypatch.setattr(nvml_mod, "NvmlBackend", unavailable("nvml"))
    with pytest.raises(BackendUnavailable) as exc:
        factory.open_backend("auto", None, CommonOptions("h", catalog.select(), 1.0))
    assert str(exc.value) == "no GPU library found; use --backend sim to try a simulated fleet"
    assert tried == ["dcgm", "nvml"]
    result = runner.invoke(app, ["collect", "--backend", "auto"])
    assert result.exit_code == 2
    assert "no GPU library found; use --backend sim to try a simulated fleet" in result.output


def test_docs_metrics_check(tmp_path) -> None:
    out = tmp_path / "metrics.md"
    assert runner.invoke(app, ["docs", "metrics", "--out", str(out), "--check"]).exit_code == 1
    assert runner.invoke(app, ["docs", "metrics", "--out", str(out)]).exit_code == 0
    assert out.read_text() == catalog.metrics_markdown()
    assert runner.invoke(app, ["docs", "metrics", "--out", str(out), "--check"]).exit_code == 0


def test_fields_lists_catalogue() -> None:
    result = runner.invoke(app, ["fields", "--all"])
    assert result.exit_code == 0
    for f in catalog.FIELDS[:5]:
        assert f.name in result.output


def test_an_error_quoting_markup_is_printed_as_is(tmp_path: Path) -> None:
    """A message quotes user input: rich markup in it ("[/x]") raised MarkupError, "[ns]" vanished."""
    bad = tmp_path / "h[ns][bold].csv"
    bad.write_text("timestamp,hostname\n")
    proc = _gpuhealth("score", "--history", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(bad) in " ".join(proc.stderr.split())


def test_score_takes_failure_records_for_the_repeat_offender_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import predictor.score as score_mod
    from simulator.families import family_config
    from simulator.run import simulate

    frame, failures = simulate(family_config("hbm-bursts", 3, nodes=2, acceleration=60), 20)
    assert len(failures) > 0
    hist, labels = tmp_path / "h.parquet", tmp_path / "f.csv"
    frame.to_parquet(hist)
    failures.to_csv(labels, index=False)
    seen: list[object] = []
    real = score_mod.build_features

    def spy(*args: object, **kw: object) -> object:
        seen.append(kw.get("failures"))
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(score_mod, "build_features", spy)
    with_records = runner.invoke(app, ["score", "--history", str(hist), "--failures", str(labels)])
    assert with_records.exit_code == 0, with_records.output
    assert len(seen) == 1 and len(seen[0]) == len(failures)  # type: ignore[arg-type]
    rows = json.loads(with_records.output)
    assert {r["gpu_uuid"] for r in rows} <= set(frame["gpu_uuid"].astype(str))
    missing = runner.invoke(app, ["score", "--history", str(hist), "--failures", str(tmp_path / "none.csv")])
    assert missing.exit_code != 0


def test_the_model_seed_reaches_the_cross_domain_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuhealth.cli.crossdomain as cli_cd

    seen: list[int] = []

    def fake(*args: object, model_seed: int, **kw: object) -> bool:
        seen.append(model_seed)
        return True

    monkeypatch.setattr(cli_cd, "evaluate_cross_domain", fake)
    for extra, expected in (([], 0), (["--model-seed", "3"], 3)):
        result = runner.invoke(app, ["evaluate", "--cross-domain", "--out", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
        assert seen[-1] == expected
    refused = runner.invoke(app, ["evaluate", "--cross-domain", "--out", str(tmp_path), "--model-seed", "-1"])
    assert refused.exit_code != 0 and len(seen) == 2


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--seeds", "917,next"], {}, "--seeds: '917,next' is not a comma-separated list of integers"),
        (["--seeds", "100"], {}, "none of them a training seed"),
        ([], {"GPUHEALTH_DEMOTE_FOR_PCIE": "soonish"}, "GPUHEALTH_DEMOTE_FOR_PCIE: invalid duration 'soonish'"),
    ],
)
def test_bad_cross_domain_flags_give_one_line_errors(
    args: list[str], env: dict[str, str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before anything is trained or scored."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "out"
    _one_line_error(_gpuhealth("evaluate", "--cross-domain", "--out", str(out), *args), needle)
    assert not out.exists()


def test_fields_lists_the_nvlink_and_fabric_series_with_their_sources() -> None:
    result = runner.invoke(app, ["fields"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    assert "gpuhealth_nvlink_crc_flit_errors_total" in result.output
    assert "nvmlDeviceGetNvLinkErrorCounter" in result.output
    assert "gpuhealth_fabric_state" in result.output and "nvmlDeviceGetGpuFabricInfoV" in result.output
