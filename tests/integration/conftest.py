"""Fixtures for integration tests: real services on loopback, started and stopped per module.

`require_tool` finds a binary (skip locally, fail in CI), `start_exporter` and
`start_prometheus` run real processes and wait for them with deadlines, `prom_query`
and `prom_api` speak Prometheus's HTTP API. When a test fails, the logs of the
services it used are attached to its report.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:  # slurm_cluster imports this module
    from tests.integration.slurm_cluster import SlurmCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL_DIRS = ("/usr/bin", "/usr/local/bin")
"""Searched after PATH: Debian's prometheus lives in /usr/bin, not always on a CI PATH."""
STARTUP_DEADLINE_S = 20.0
"""Exporter and Prometheus are each ready in 1-2 s here; 20 s absorbs a loaded CI runner."""
POLL_S = 0.1

SIM_GPUS = 8
SIM_SEED = 7
SIM_FAULT = "3:ecc:0.002"
"""An ECC fault on GPU 3 ripening in 7.2 simulated seconds (one per 1 s sample): it raises
XID 63 (row remap) within the first few samples, so gpuhealth_xid_errors_total exists within
seconds. The GPU stays on the bus (ECC faults never drop it), so all 8 GPUs keep reporting."""


def require_tool(name: str, extra_dirs: Sequence[str] = TOOL_DIRS) -> str:
    """Path of an executable from PATH or `extra_dirs`; skip when absent, but fail in CI."""
    path = shutil.which(name)
    if path is None:
        for d in extra_dirs:
            candidate = Path(d) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                path = str(candidate)
                break
    if path is None:
        unavailable(f"{name!r} not found on PATH or in {', '.join(extra_dirs)}",
                    f"CI must install it (e.g. apt-get install {name})")  # fmt: skip
    return path


def require_module(name: str) -> Any:
    """A module of the dev extras (`pip install -e '.[dev]'`, which `make test` runs): skipped locally
    without it, a failure under CI=true."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        unavailable(f"{name} is not installed ({err})", "make test installs the dev extras")


def unavailable(where: str, in_ci: str) -> NoReturn:
    """Skip because of `where`; under CI=true fail, adding `in_ci`: a skipped test in CI would hide a
    broken pipeline, so a missing tool, service or permission fails loudly there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{where}; {in_ci}", pytrace=False)
    pytest.skip(where, allow_module_level=True)


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if the process does not exit within `timeout`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(
    url: str,
    timeout: float = 5.0,
    *,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """(status, body) of a GET (over TLS with `context`); HTTP errors are returned, connection errors raised."""
    try:
        req = urllib.request.Request(url, headers=dict(headers or {}))
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()


@dataclass
class Service:
    """A process started for a test, with the URL it serves and the file it logs to."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_tail(self, max_chars: int = 6000) -> str:
        """The end of the service's log (stdout and stderr together)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as err:
            return f"(cannot read {self.log_path}: {err})"
        return text if len(text) <= max_chars else "...\n" + text[-max_chars:]

    def get(self, path: str) -> str:
        """Body of GET url+path; fails unless HTTP 200."""
        status, body = http_get(self.url + path)
        assert status == 200, f"GET {self.url}{path}: HTTP {status}: {body[:300]!r}"
        return body.decode()

    def assert_alive(self) -> None:
        """Fail, with its log, if the process exited while tests were using it."""
        died = self.proc.poll()
        if died is not None:
            pytest.fail(
                f"{self.name} exited with {died} while tests used it\n--- log ---\n{self.log_tail()}",
                pytrace=False,
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit within `timeout`."""
        terminate(self.proc, timeout)


def start_service(
    name: str,
    cmd: Sequence[str],
    url: str,
    ready_path: str,
    log_path: Path,
    env: dict[str, str] | None = None,
    *,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> Service:
    """Start `cmd` and wait until GET url+ready_path answers 200; fail with its log otherwise.

    The child gets this process's environment without any GPUHEALTH_* variable (a developer's
    settings must not leak into tests), plus `env` (e.g. {"GPUHEALTH_PROBE_EVERY": "10s"}).
    `context` and `headers` go with the readiness GET (TLS, credentials).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")} | (env or {})
    env["PYTHONUNBUFFERED"] = "1"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=env
        )
    svc = Service(name, proc, url, log_path)
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"{name} exited with {proc.returncode} before it was ready\n"
                f"command: {' '.join(cmd)}\n--- log ---\n{svc.log_tail()}",
                pytrace=False,
            )
        try:
            status, body = http_get(url + ready_path, timeout=1.0, context=context, headers=headers)
            if status == 200:
                return svc
            last = f"HTTP {status}: {body[:200]!r}"
        except OSError as err:  # not listening yet
            last = str(err)
        time.sleep(POLL_S)
    svc.stop()
    pytest.fail(
        f"{name} not ready at {url}{ready_path} within {STARTUP_DEADLINE_S:g}s (last: {last})\n"
        f"command: {' '.join(cmd)}\n--- log ---\n{svc.log_tail()}",
        pytrace=False,
    )


def exporter_command(port: int, *extra: str) -> list[str]:
    """`gpuhealth collect` on a simulated node, run with this interpreter (the venv's)."""
    return [
        sys.executable, "-m", "gpuhealth.cli", "collect",
        "--backend", "sim",
        "--sim-gpus", str(SIM_GPUS),
        "--seed", str(SIM_SEED),
        "--interval", "1s",
        "--listen", f"127.0.0.1:{port}",
        *extra,
    ]  # fmt: skip


def start_exporter(
    workdir: Path, *extra: str, context: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None
) -> Service:
    """Start `gpuhealth collect --backend sim` on a free port and wait for /healthz 200.

    With `context` (its `extra` give it a --web-config-file with TLS) it is reached over https.
    """
    port = free_port()
    log_path = workdir / "gpuhealth-collect.log"
    url = f"{'https' if context else 'http'}://127.0.0.1:{port}"
    return start_service(
        "gpuhealth collect", exporter_command(port, *extra), url, "/healthz", log_path,
        context=context, headers=headers,
    )  # fmt: skip


def prometheus_config(
    targets: dict[str, Sequence[str]],
    rule_files: Sequence[Path] = (),
    alertmanagers: Sequence[str] = (),
    scrape: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """prometheus.yml scraping each job's targets every second, sending alerts to `alertmanagers` (host:port).

    `scrape` adds settings to a job's scrape config, e.g. {"gpu": {"scheme": "https", "basic_auth": {...}}}.
    """
    lines = [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "  evaluation_interval: 1s",
    ]
    if rule_files:
        lines.append("rule_files:")
        lines += [f"  - {json.dumps(str(p))}" for p in rule_files]
    if alertmanagers:
        lines += [
            "alerting:",
            "  alertmanagers:",
            "    - static_configs:",
            f"        - targets: {json.dumps(list(alertmanagers))}",
        ]
    lines.append("scrape_configs:")
    for job, addrs in targets.items():
        lines += [
            f"  - job_name: {json.dumps(job)}",
            "    static_configs:",
            f"      - targets: {json.dumps(list(addrs))}",
        ]
        # JSON is YAML: each value is written as one flow-style line.
        lines += [f"    {key}: {json.dumps(value)}" for key, value in (scrape or {}).get(job, {}).items()]
    return "\n".join(lines) + "\n"


def start_prometheus(
    workdir: Path,
    targets: dict[str, Sequence[str]],
    rule_files: Sequence[Path] = (),
    alertmanagers: Sequence[str] = (),
    scrape: Mapping[str, Mapping[str, Any]] | None = None,
) -> Service:
    """Start the system's Prometheus on a free loopback port and wait for /-/ready (see `prometheus_config`)."""
    binary = require_tool("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(prometheus_config(targets, rule_files, alertmanagers, scrape))
    port = free_port()
    cmd = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    url = f"http://127.0.0.1:{port}"
    return start_service("prometheus", cmd, url, "/-/ready", workdir / "prometheus.log")


def start_alertmanager(workdir: Path, config: str) -> Service:
    """Start the system's Alertmanager (Debian: prometheus-alertmanager) with `config` (YAML text),
    clustering off, on a free loopback port, and wait for /-/ready."""
    binary = require_tool("prometheus-alertmanager")
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "alertmanager.yml"
    config_path.write_text(config)
    port = free_port()
    cmd = [
        binary,
        f"--config.file={config_path}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # empty: no gossip cluster, no port of its own
        "--log.level=info",
    ]
    url = f"http://127.0.0.1:{port}"
    return start_service("alertmanager", cmd, url, "/-/ready", workdir / "alertmanager.log")


def prom_api(url: str, path: str, params: dict[str, str] | None = None) -> Any:
    """`data` of a Prometheus HTTP API answer; a non-success answer fails with its error."""
    query = "?" + urllib.parse.urlencode(params) if params else ""
    status, body = http_get(f"{url}{path}{query}", timeout=10.0)
    try:
        answer = json.loads(body)
    except ValueError:
        pytest.fail(f"GET {path}{query}: HTTP {status}, not JSON: {body[:300]!r}", pytrace=False)
    if answer.get("status") != "success":
        pytest.fail(
            f"GET {path}{query}: HTTP {status}, {answer.get('errorType')}: {answer.get('error')}",
            pytrace=False,
        )
    return answer["data"]


def prom_query(url: str, expr: str) -> list[dict[str, Any]]:
    """Instant-query `expr`; the result as a list of {"metric": labels, "value": [t, "v"]}."""
    data = prom_api(url, "/api/v1/query", {"query": expr})
    if data["resultType"] != "vector":
        # scalar/string results are [t, "v"]: wrap them so callers always get a list
        return [{"metric": {}, "value": data["result"]}]
    return list(data["result"])


def poll(
    what: str,
    probe: Callable[[], Any],
    done: Callable[[Any], bool],
    deadline_s: float = 30.0,
) -> Any:
    """Call `probe` until `done(result)` or the deadline; fail showing the last result."""
    deadline = time.monotonic() + deadline_s
    result = probe()
    while not done(result):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached within {deadline_s:g}s; last result: {result!r}"[:3000])
        time.sleep(POLL_S * 2)
        result = probe()
    return result


@dataclass(frozen=True)
class PromClient:
    """Prometheus's HTTP API at `url`, for tests."""

    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query (see `prom_query`)."""
        return prom_query(self.url, expr)

    def api(self, path: str, params: dict[str, str] | None = None) -> Any:
        """`data` of any API endpoint (see `prom_api`)."""
        return prom_api(self.url, path, params)

    def wait_for(
        self, expr: str, done: Callable[[list[dict[str, Any]]], bool], deadline_s: float = 30.0
    ) -> list[dict[str, Any]]:
        """Query `expr` until `done(result)`; fail with the last result at the deadline."""
        return poll(f"query {expr!r}", lambda: self.query(expr), done, deadline_s)

    def own_metrics(self) -> str:
        """Prometheus's own /metrics text (scrape and storage counters)."""
        status, body = http_get(f"{self.url}/metrics")
        assert status == 200, f"GET {self.url}/metrics: HTTP {status}"
        return body.decode()


@dataclass(frozen=True)
class SimNode:
    """What the simulated node behind `gpuhealth_exporter` looks like."""

    gpus: int = SIM_GPUS
    seed: int = SIM_SEED
    fault: str = SIM_FAULT
    hostname: str = "sim-node-00"
    """simulator.fleet names its nodes sim-node-NN."""

    @property
    def faulty_gpu(self) -> str:
        """`gpu` label of the GPU with the injected fault."""
        return self.fault.split(":", 1)[0]


@pytest.fixture(scope="module")
def sim_node() -> SimNode:
    """Description of the simulated node the exporter serves."""
    return SimNode()


@pytest.fixture(scope="module")
def gpuhealth_exporter(tmp_path_factory: pytest.TempPathFactory, sim_node: SimNode) -> Iterator[Service]:
    """A running `gpuhealth collect --backend sim` (8 GPUs, seed 7, 1 s, ECC fault on GPU 3)."""
    svc = start_exporter(tmp_path_factory.mktemp("exporter"), "--sim-fault", sim_node.fault)
    yield svc
    try:
        svc.assert_alive()
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, gpuhealth_exporter: Service) -> Iterator[Service]:
    """Prometheus scraping the exporter every second as job "gpu"."""
    target = gpuhealth_exporter.url.removeprefix("http://")
    svc = start_prometheus(tmp_path_factory.mktemp("prometheus"), {"gpu": [target]})
    yield svc
    try:
        svc.assert_alive()
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def prom(prometheus: Service) -> PromClient:
    """A client for the `prometheus` fixture's HTTP API."""
    return PromClient(prometheus.url)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the logs of the services a failed test used to its report."""
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            # a Service, or a fixture holding several that lists them with .services()
            services = value.services() if callable(getattr(value, "services", None)) else [value]
            for svc in services:
                if isinstance(svc, Service):
                    report.sections.append((f"{svc.name} log ({svc.log_path})", svc.log_tail()))
    return report


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A Slurm cluster per test module: three nodes gh-node-1..3, each Features=reliable,
    Weight=1, Gres=gpu:h100:2 (tests/integration/slurm_cluster.py)."""
    from tests.integration.slurm_cluster import start_slurm_cluster

    with start_slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture
def slurm(shared_cluster: SlurmCluster) -> SlurmCluster:
    """The module's cluster with no jobs and every node IDLE, reliable, Weight=1."""
    shared_cluster.reset()
    return shared_cluster
