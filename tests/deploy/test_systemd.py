"""The systemd units and environment files of deploy/systemd, checked as systemd would load them.

`systemd-analyze verify` refuses a unit whose ExecStart= binary does not exist ("Command
/opt/gpuhealth/bin/gpuhealth is not executable", exit status 1), and /opt/gpuhealth is the
install's virtual environment, absent here; so each unit is verified from a copy whose ExecStart=
names this virtual environment's own `gpuhealth` script (the same kind of file; verify never runs
it). A mistyped key or a bad value is only a warning on stderr with exit status 0 ("Unknown key
…, ignoring", "Failed to parse protect system value, ignoring"): systemd would start the unit
without that protection, so any output at all is a failure, and a negative test proves it is seen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import Settings
from core.units import parse_duration
from tests.integration.conftest import require_tool, unavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
UNIT_DIR = REPO_ROOT / "deploy" / "systemd"
INSTALLED = "/opt/gpuhealth/bin/gpuhealth"
UNITS = {"gpuhealth-collect.service": "collect", "gpuhealth-serve.service": "serve"}
"""Unit file → its command and the name of its environment file (/etc/gpuhealth/<name>.env)."""
MAX_EXPOSURE = {"gpuhealth-collect.service": 1.6, "gpuhealth-serve.service": 1.4}
"""`systemd-analyze security` scores measured with systemd 252 (Debian 12): the collector must reach
the GPUs and may not forbid W+X memory (CUDA's JIT). Dropping a protection raises the score
(RestrictNamespaces= by 0.7; ProtectSystem= by 0.2 on the collector, while serve's DynamicUser=
implies it); another systemd may weigh differently, then measure again."""
TIMEOUT_S = 60
ASSIGNMENT = re.compile(r"^(#)?(GPUHEALTH_[A-Z0-9_]+)=(.*)$")


@pytest.fixture(scope="module")
def analyze() -> str:
    """Path of systemd-analyze (Debian: package systemd; skipped locally when missing, a failure in CI)."""
    return require_tool("systemd-analyze")


def stand_in() -> Path:
    """An executable that exists wherever the tests run: this virtual environment's gpuhealth."""
    script = Path(sys.executable).with_name("gpuhealth")
    return script if script.is_file() and os.access(script, os.X_OK) else Path(sys.executable)


def staged(unit: str, dest: Path, extra: str = "", drop: str = "") -> Path:
    """A copy of `unit` in `dest` with ExecStart= on the stand-in binary, `extra` lines in [Service]
    and without the lines that start with `drop`."""
    text = (UNIT_DIR / unit).read_text()
    if drop:
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(drop))
    shipped = f"ExecStart={INSTALLED} {UNITS[unit]}\n"
    assert text.count(shipped) == 1, f"{unit}: expected exactly one {shipped.strip()!r}"
    # Quoted, with systemd's specifier character escaped: the path may hold spaces or '%'.
    binary = str(stand_in()).replace("%", "%%")
    text = text.replace(shipped, f'ExecStart="{binary}" {UNITS[unit]}\n')
    if extra:
        text = text.replace("[Service]\n", f"[Service]\n{extra}\n", 1)
    path = dest / unit
    path.write_text(text)
    return path


def run_analyze(analyze: str, *args: str) -> subprocess.CompletedProcess[str]:
    """systemd-analyze with `args`, in the C locale, its output captured."""
    env = dict(os.environ, LC_ALL="C", SYSTEMD_COLORS="0")
    return subprocess.run(
        [analyze, *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=env, stdin=subprocess.DEVNULL
    )


def verify_problems(analyze: str, path: Path) -> list[str]:
    """What `systemd-analyze verify` says about the unit: every line it prints, and a failing exit status."""
    proc = run_analyze(analyze, "verify", "--man=no", str(path))
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode != 0:
        problems.append(f"exit status {proc.returncode}")
    return problems


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_verifies_without_a_word(analyze: str, unit: str, tmp_path: Path) -> None:
    """systemd loads the unit with every key understood and every value parsed."""
    assert verify_problems(analyze, staged(unit, tmp_path)) == []


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        ("ProtectSystem=bogus", "Failed to parse protect system value"),  # a bad value: exit status 0
        ("ProtectSytem=strict", "Unknown key"),  # a typo: exit status 0
        ("DeviceAllow=/dev/nvidiactl rwx", "Invalid device rights"),  # only r, w and m
    ],
)
def test_verify_catches_a_broken_unit(analyze: str, tmp_path: Path, broken: str, said: str) -> None:
    """The check above fails on a unit systemd would start with a protection silently dropped."""
    problems = verify_problems(analyze, staged("gpuhealth-collect.service", tmp_path, broken))
    assert any(said in line for line in problems), problems


def test_the_shipped_path_is_why_the_copy_is_rewritten(analyze: str, tmp_path: Path) -> None:
    """Verified as shipped, the unit fails on its absent /opt/gpuhealth binary, and only on that."""
    if Path(INSTALLED).exists():
        pytest.skip(f"{INSTALLED} is installed here")
    path = tmp_path / "gpuhealth-serve.service"
    path.write_text((UNIT_DIR / path.name).read_text())
    problems = verify_problems(analyze, path)
    assert any(f"Command {INSTALLED} is not executable" in line for line in problems), problems
    assert problems[-1] == "exit status 1"


def exposure(analyze: str, path: Path) -> tuple[float, str]:
    """(overall exposure, the whole report) of `systemd-analyze security --offline=true` on a unit file."""
    proc = run_analyze(analyze, "security", "--offline=true", str(path))
    if proc.returncode != 0 and "offline" in proc.stderr:
        unavailable(f"this systemd has no security --offline (v250+): {proc.stderr.strip()}",
                    "CI's Debian bookworm ships systemd 252")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    m = re.search(rf"Overall exposure level for {re.escape(path.name)}: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, proc.stdout[-2000:]
    return float(m.group(1)), proc.stdout


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_sandbox_exposure_stays_low(analyze: str, unit: str, tmp_path: Path) -> None:
    """The sandbox is rated at most as exposed as measured."""
    score, report = exposure(analyze, staged(unit, tmp_path))
    assert score <= MAX_EXPOSURE[unit], f"{unit}: exposure {score} > {MAX_EXPOSURE[unit]}\n{report}"


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_exposure_bound_catches_a_dropped_protection(analyze: str, unit: str, tmp_path: Path) -> None:
    """Without RestrictNamespaces= the same unit goes over its bound."""
    score, _ = exposure(analyze, staged(unit, tmp_path, drop="RestrictNamespaces="))
    assert score > MAX_EXPOSURE[unit]


def env_file(unit: str) -> Path:
    """The example environment file that goes with `unit`."""
    return UNIT_DIR / f"gpuhealth-{UNITS[unit]}.env"


def assignments(path: Path) -> tuple[dict[str, str], list[str]]:
    """(active settings, names in commented-out examples) of an environment file; fails on a line
    that is neither a comment nor KEY=value, and on a setting without a comment line above it."""
    active: dict[str, str] = {}
    examples: list[str] = []
    previous = ""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = ASSIGNMENT.match(line)
        if m:
            commented, name, value = m.groups()
            assert previous.startswith("# "), f"{path.name}:{n}: {name} has no comment line above it"
            assert value == value.strip() and not value.startswith(("'", '"')), f"{path.name}:{n}: plain values"
            if commented:
                examples.append(name)
            else:
                active[name] = value
        else:
            assert line == "" or line.startswith("# "), f"{path.name}:{n}: neither a comment nor a setting"
        previous = line
    return active, examples


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_env_file_holds_settings_that_exist(unit: str) -> None:
    """Every name in the example is a setting, and the active ones validate (durations included)."""
    text = (UNIT_DIR / unit).read_text()
    assert f"EnvironmentFile=-/etc/gpuhealth/{UNITS[unit]}.env\n" in text
    active, examples = assignments(env_file(unit))
    fields = Settings.model_fields
    unknown = [n for n in [*active, *examples] if n.removeprefix("GPUHEALTH_").lower() not in fields]
    assert unknown == [], f"{env_file(unit).name}: not in core/settings.py: {unknown}"
    values = {n.removeprefix("GPUHEALTH_").lower(): v for n, v in active.items()}
    # Validation alone (no environment, no .env): raises on a value a setting refuses.
    Settings.model_validate(values)
    for key, value in values.items():
        default = fields[key].default
        if isinstance(default, str) and _is_duration(default):
            assert _is_duration(value), f"GPUHEALTH_{key.upper()}={value}: not a duration"


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_env_file_reads_the_same_in_sh(unit: str) -> None:
    """sh sees the values systemd does: the Slurm health check sources collect.env with sh."""
    active, _ = assignments(env_file(unit))
    sh = require_tool("sh")
    script = 'set -a; . "$1"; env'
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")}
    proc = subprocess.run(
        [sh, "-c", script, "sh", str(env_file(unit))], capture_output=True, text=True, timeout=TIMEOUT_S, env=clean
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    seen = dict(line.split("=", 1) for line in proc.stdout.splitlines() if line.startswith("GPUHEALTH_"))
    assert seen == active
