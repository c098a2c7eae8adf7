"""`gpuhealth collect`, the node agent, loads none of the service's heavy libraries (pandas, pyarrow,
scipy, scikit-learn, matplotlib): it reads NVML or DCGM and serves /metrics, and a DaemonSet pod on
every GPU node should not carry a data-science stack to do it (docs/decisions/0076)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "pyarrow", "scipy", "sklearn", "matplotlib")

# The whole command as the console script runs it, in a fresh interpreter: the CLI with every group,
# settings, flags, the backend, the collector built and started, one round sampled and scraped. Only
# the wait for SIGTERM is replaced, by "stop once /metrics answered".
CHILD = f"HEAVY = {set(HEAVY)!r}\n" + textwrap.dedent(
    """
    import json, sys, time, urllib.request

    import collector.run
    from gpuhealth.cli import app

    scraped = []

    def one_round(running):
        running.start()
        try:
            deadline = time.monotonic() + 20
            while running.sampler.latest is None and time.monotonic() < deadline:
                time.sleep(0.05)
            url = f"http://127.0.0.1:{running.server.port}/metrics"
            scraped.append(urllib.request.urlopen(url, timeout=10).read().decode().count("DCGM_FI_DEV_GPU_TEMP{"))
        finally:
            running.stop()

    collector.run.run_until_signalled = one_round
    args = sys.argv[1:]
    if args[0] == "fake-nvml":  # NVML answered by the tests' double: the whole nvml path, no GPU needed
        from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml

        gpus = [FakeGpu(f"GPU-{i:08x}-0000-0000-0000-000000000000", pci_bus_id=f"00000000:{24 + i:02X}:00.0")
                for i in range(8)]
        sys.modules["pynvml"] = FakeNvml(gpus)
        args = ["--backend", "nvml", *args[1:]]
    code = 0
    try:
        app(["collect", "--listen", "127.0.0.1:0", *args])
    except SystemExit as e:
        code = e.code
    loaded = sorted({m.partition(".")[0] for m in sys.modules} & HEAVY)
    print(json.dumps({"exit": code, "scraped": scraped, "heavy": loaded, "numpy": "numpy" in sys.modules}))
    """
)


def _collect(*args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHEALTH_")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def test_a_simulated_node_is_collected_and_served_without_the_heavy_libraries() -> None:
    result = _collect("--backend", "sim", "--sim-gpus", "8")
    assert result["scraped"] == [8], result["stderr"]  # it did run: eight GPUs' temperatures served
    assert result["heavy"] == []


def test_a_node_read_through_nvml_is_collected_and_served_without_them_or_numpy() -> None:
    result = _collect("fake-nvml")
    assert result["scraped"] == [8], result["stderr"]
    assert result["heavy"] == []
    assert result["numpy"] is False  # only the simulator needs it


@pytest.mark.parametrize("backend", ["nvml", "dcgm", "auto"])
def test_the_gpu_backends_load_neither_the_heavy_libraries_nor_numpy(backend: str) -> None:
    # Without a GPU the backend does not open (one error line), after the command has imported all
    # it needs to get there; on a GPU node it runs a round, as the sim test does.
    result = _collect("--backend", backend)
    assert result["exit"] == 2 or result["scraped"], result["stderr"]
    assert result["heavy"] == []
    assert result["numpy"] is False  # only the simulator needs it
