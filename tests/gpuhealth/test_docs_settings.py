"""`gpuhealth docs settings`: docs/configuration.md's table from core/settings.py and the CLI's flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from typer.testing import CliRunner

from core import settings_doc
from core.settings import Settings
from gpuhealth.cli import app
from gpuhealth.cli import docs as cli_docs

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
runner = CliRunner()


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_has_a_one_line_description(name: str) -> None:
    text = Settings.model_fields[name].description
    assert text, f"{name}: give it Field(description=...), the line docs/configuration.md shows"
    assert "\n" not in text and len(text) <= settings_doc.MAX_DESCRIPTION, (name, len(text))


def test_a_setting_without_a_description_is_refused() -> None:
    class Bare(Settings):
        extra_knob: int = Field(3)

    with pytest.raises(ValueError, match="extra_knob has no description"):
        settings_doc.settings_table({}, Bare)


def test_flags_come_from_the_commands_that_read_the_setting() -> None:
    flags = cli_docs.setting_flags(app)
    assert flags["listen"] == {"--listen": ["collect"]}
    assert flags["api_listen"] == {"--listen": ["serve"]}  # serve's --listen is the API's
    assert flags["db"] == {"--db": ["serve", "actuate", "db", "model"]}  # not demo's SQLite file, not train's switch
    assert flags["token"] == {"--token-file": ["serve"]}
    assert flags["service_token"] == {"--service-token": ["collect"], "--token-file": ["slurm-healthcheck"]}
    assert flags["actuate"] == {"--actuate": ["serve"], "--mode": ["actuate"]}
    assert "watch_threshold" not in flags  # only the environment sets it
    assert set(flags) <= set(Settings.model_fields)


def test_the_flag_tables_name_options_that_exist() -> None:
    options = {(cmd.split()[0], param) for cmd, param, _ in cli_docs.options(app)}
    named = set(cli_docs.READS_SETTING) | cli_docs.NOT_THE_SETTING
    assert named <= options, named - options
    assert set(cli_docs.READS_SETTING.values()) <= set(Settings.model_fields)


def test_the_table_has_a_row_per_setting_in_its_section() -> None:
    table = settings_doc.settings_table(cli_docs.setting_flags(app))
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(Settings.model_fields)
    (api,) = [r for r in rows if r.startswith("| `api_listen`")]
    assert api == (
        "| `api_listen` | `GPUHEALTH_API_LISTEN` | `--listen` (serve) | `0.0.0.0:8080` | "
        f"{Settings.model_fields['api_listen'].description} |"
    )
    (th,) = [r for r in rows if r.startswith("| `watch_threshold`")]
    assert "| — | `0.3` |" in th
    (backend,) = [r for r in rows if r.startswith("| `backend`")]
    assert "One of `auto`, `nvml`, `dcgm`, `sim`, `replay`." in backend
    (model,) = [r for r in rows if r.startswith("| `model`")]
    assert "| unset |" in model


def test_docs_settings_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    out.write_text(PAGE.read_text().replace("| `0.0.0.0:9400` |", "| `0.0.0.0:9401` |"))
    stale = runner.invoke(app, ["docs", "settings", "--out", str(out), "--check"])
    assert stale.exit_code == 1 and "out of date" in stale.output
    assert runner.invoke(app, ["docs", "settings", "--out", str(out)]).exit_code == 0
    assert out.read_text() == PAGE.read_text()  # the block rewritten, the hand-written text kept
    assert runner.invoke(app, ["docs", "settings", "--out", str(out), "--check"]).exit_code == 0


def test_a_page_without_the_block_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    out.write_text("# Configuration\n")
    result = runner.invoke(app, ["docs", "settings", "--out", str(out)])
    assert result.exit_code == 2 and "generated block" in result.output


def test_the_committed_page_is_current() -> None:
    text = settings_doc.fill(PAGE.read_text(), settings_doc.settings_table(cli_docs.setting_flags(app)))
    assert PAGE.read_text() == text, "run `make generate`"
