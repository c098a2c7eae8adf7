#!/usr/bin/env bash
# shellcheck disable=SC2317 # the step functions are called indirectly, by run_step
# Device check: what only a machine with a real NVIDIA GPU can tell us.
#
#   1. nvidia-smi -L (when installed)
#   2. the NVML backend read once: GPUs found, one reading, catalogue fields NVML lacks here
#   3. `gpuhealth collect --backend nvml` served for a few seconds: /healthz, /metrics
#   4. pytest -m gpu (the tests marked for real GPUs; "no tests" is fine)
#   5. the stress probes (kernels/) on every GPU with cuBLAS/CuPy baselines and fault
#      injection: one table against the targets of docs/probes.md (skipped without CuPy)
#   6. one summary line: DEVICE CHECK PASS or DEVICE CHECK FAIL
#
# Run from the repository (any directory inside it): scripts/device-check.sh
# Needs python3 with nvidia-ml-py and the project's dependencies; when the system python
# lacks them it builds /tmp/gh-venv (with system site packages) and pip-installs the
# project there, which needs a package index.
#
# Environment:
#   DEVICE_CHECK_BACKEND  nvml (default), or sim to rehearse steps 2-3 without a GPU
#   DEVICE_CHECK_PORT     port of the exporter in step 3 (default 19400, dcgm-exporter's + 0)
#   DEVICE_CHECK_SECONDS  how long the exporter samples before /metrics is read (default 5)
#   DEVICE_CHECK_PROBE_BUDGET  probe budget per GPU in step 5 (default 55: start-up and
#                         the baselines fit under the 60 s target)
#   PYTHON                interpreter to try first
#   OUT                   when set, the report is also written to $OUT/device-check.txt
# Exit status: 0 when every step passed or was skipped, 1 otherwise.
set -euo pipefail

BACKEND="${DEVICE_CHECK_BACKEND:-nvml}"
PORT="${DEVICE_CHECK_PORT:-19400}"
RUN_SECONDS="${DEVICE_CHECK_SECONDS:-5}"
VENV=/tmp/gh-venv
SKIP=77 # exit status of a step that did not apply (automake's convention)

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

TEE_PID=""
if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee "$OUT/device-check.txt") 2>&1
    TEE_PID=$!
fi

case "$BACKEND" in
    nvml | sim) ;;
    *)
        echo "DEVICE_CHECK_BACKEND must be nvml or sim, not '$BACKEND'"
        exit 2
        ;;
esac

# A hung driver call must not hang the check: bound every step that talks to the GPU.
LIMIT=()
if command -v timeout >/dev/null 2>&1; then
    LIMIT=(timeout --kill-after=10)
fi
limited() { # SECONDS CMD...: run CMD, killed after SECONDS when `timeout` exists
    local secs=$1
    shift
    if ((${#LIMIT[@]})); then
        "${LIMIT[@]}" "$secs" "$@"
    else
        "$@"
    fi
}

RESULTS=()
FAILED=0
run_step() { # TITLE FUNCTION: run FUNCTION in a subshell with errexit, record its outcome
    local title=$1 rc
    shift
    printf '\n=== %s ===\n' "$title"
    set +e
    (
        set -euo pipefail
        "$@"
    )
    rc=$?
    set -e
    case $rc in
        0) RESULTS+=("PASS  $title") ;;
        "$SKIP") RESULTS+=("SKIP  $title") ;;
        *)
            RESULTS+=("FAIL  $title (exit $rc)")
            FAILED=1
            ;;
    esac
}

# --- python with the project's dependencies --------------------------------------------

NEEDED="import prometheus_client, typer, rich, numpy, pydantic, pydantic_settings"
if [[ "$BACKEND" == nvml ]]; then
    NEEDED="$NEEDED, pynvml"
fi
python_ok() { # PY: can it import the dependencies and this checkout's packages?
    [[ -x "$(command -v "$1" 2>/dev/null)" ]] &&
        "$1" -c "$NEEDED; import core.catalog, collector.sampler" >/dev/null 2>&1
}

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 "$REPO_ROOT/.venv/bin/python" "$VENV/bin/python"; do
        if [[ -n "$candidate" ]] && python_ok "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

printf '=== device check: backend %s, host %s, %s ===\n' "$BACKEND" "$(hostname)" "$(date -u +%FT%TZ)"
echo "repo: $REPO_ROOT ($(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"

PY=""
if ! PY="$(find_python)"; then
    echo "no python with nvidia-ml-py and the project's dependencies; building $VENV"
    if python3 -m venv --system-site-packages "$VENV" &&
        "$VENV/bin/pip" install --quiet --disable-pip-version-check -e "$REPO_ROOT"; then
        "$VENV/bin/pip" install --quiet --disable-pip-version-check pytest || true
    else
        echo "pip install into $VENV failed (no package index reachable?)"
    fi
    PY="$(find_python || true)"
fi
if [[ -n "$PY" ]]; then
    echo "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
    RESULTS+=("PASS  python environment")
else
    echo "python: none can import: $NEEDED"
    RESULTS+=("FAIL  python environment")
    FAILED=1
fi

# --- 1. nvidia-smi ----------------------------------------------------------------------

step_nvidia_smi() {
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "nvidia-smi not installed"
        return "$SKIP"
    fi
    limited 60 nvidia-smi -L
    limited 60 nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,temperature.gpu,power.draw \
        --format=csv
}

# --- 2. the backend, read once ------------------------------------------------------------

step_backend_read() {
    [[ -n "$PY" ]] || return 1
    DEVICE_CHECK_BACKEND="$BACKEND" limited 120 "$PY" - <<'PYTHON'
"""Open the backend, print its GPUs and one reading, list catalogue fields it lacks."""
import math
import os
import socket
import sys
import time

from core import catalog

name = os.environ["DEVICE_CHECK_BACKEND"]
host = socket.gethostname()
if name == "nvml":
    from collector.backends.nvml import NvmlBackend

    backend = NvmlBackend(hostname=host)
else:
    from collector.backends.sim import SimBackend

    backend = SimBackend(gpus_per_node=2, seed=7)
problems = []
try:
    gpus = backend.gpus()
    print(f"{len(gpus)} GPU(s) via the {backend.name} backend:")
    print(f"  {'idx':>3}  {'uuid':<40}  {'model':<24}  {'pci_bus_id':<16}  {'serial':<14}  driver")
    for g in gpus:
        print(
            f"  {g.index:>3}  {g.uuid:<40}  {g.model_name:<24}  {g.pci_bus_id:<16}  "
            f"{g.serial:<14}  {g.driver_version}"
        )
    if not gpus:
        problems.append("no GPU found")
    t0 = time.perf_counter()
    readings = backend.read()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    readings = backend.read()
    second_s = time.perf_counter() - t0
    print(f"read(): {first_s * 1e3:.1f} ms the first time, {second_s * 1e3:.1f} ms the second")
    if len(readings) != len(gpus):
        problems.append(f"read() returned {len(readings)} readings for {len(gpus)} GPUs")
    for r in readings:
        if r.lost:
            problems.append(f"GPU {r.info.index} reads as lost: {r.error}")
    unknown = sorted({k for r in readings for k in r.values} - set(catalog.BY_NAME))
    if unknown:
        problems.append(f"values not in the catalogue: {', '.join(unknown)}")

    def show(v):
        if v is None:
            return "-"
        if math.isnan(v):
            return "nan"
        return f"{v:.6g}"

    print()
    print(f"  {'field':<28}" + "".join(f"{'gpu ' + str(r.info.index):>14}" for r in readings))
    for f in catalog.FIELDS:
        print(f"  {f.name:<28}" + "".join(f"{show(r.values.get(f.name)):>14}" for r in readings))
    print()
    for r in readings:
        absent = [
            f.name
            for f in catalog.FIELDS
            if f.nvml is not None and (r.values.get(f.name) is None or math.isnan(r.values[f.name]))
        ]
        print(f"GPU {r.info.index}: NVML-sourced fields absent: {', '.join(absent) or 'none'}")
    dcgm_only = [f.name for f in catalog.FIELDS if f.nvml is None]
    print(f"DCGM-only fields (never from NVML): {', '.join(dcgm_only)}")
    for r in readings:
        t = r.values.get("gpu_temp_c")
        if t is None or not 5 <= t <= 120:
            problems.append(f"GPU {r.info.index}: gpu_temp_c {t} is missing or implausible")
    events = backend.drain_xid_events()
    print(f"XID events since start: {len(events)}" + "".join(f"\n  {e}" for e in events))
finally:
    backend.close()
for p in problems:
    print(f"problem: {p}")
sys.exit(1 if problems else 0)
PYTHON
}

# --- 3. the exporter ----------------------------------------------------------------------

fetch() { # URL FILE: write the body to FILE, print the HTTP status (000 when unreachable)
    if command -v curl >/dev/null 2>&1; then
        curl -s -m 10 -o "$2" -w '%{http_code}' "$1" || echo 000
    else
        "$PY" - "$1" "$2" <<'PYTHON'
import sys
import urllib.error
import urllib.request

url, path = sys.argv[1], sys.argv[2]
try:
    with urllib.request.urlopen(url, timeout=10) as resp:
        status, body = resp.status, resp.read()
except urllib.error.HTTPError as err:
    status, body = err.code, err.read()
except OSError:
    status, body = 0, b""
open(path, "wb").write(body)
print(f"{status:03d}")
PYTHON
    fi
}

step_exporter() {
    [[ -n "$PY" ]] || return 1
    local work log pid status deadline
    work="$(mktemp -d /tmp/gh-device-check.XXXXXX)"
    log="$work/collect.log"
    local args=(collect --backend "$BACKEND" --listen "127.0.0.1:$PORT" --interval 1s)
    [[ "$BACKEND" == sim ]] && args+=(--sim-gpus 2 --seed 7)
    echo "starting: $PY -m gpuhealth.cli ${args[*]}"
    "$PY" -m gpuhealth.cli "${args[@]}" >"$log" 2>&1 &
    pid=$!
    # shellcheck disable=SC2064 # expand now: the subshell's pid and work dir
    trap "kill $pid 2>/dev/null || true; rm -rf '$work'" EXIT

    deadline=$((SECONDS + 30))
    until [[ "$(fetch "http://127.0.0.1:$PORT/healthz" "$work/healthz")" == 200 ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the exporter exited before it was healthy; its log:"
            cat "$log"
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "/healthz not 200 within 30 s (last: $(cat "$work/healthz" 2>/dev/null)); log:"
            cat "$log"
            return 1
        fi
        sleep 0.2
    done
    echo "healthy after $((SECONDS - deadline + 30)) s; sampling for ${RUN_SECONDS} s"
    sleep "$RUN_SECONDS"

    status="$(fetch "http://127.0.0.1:$PORT/healthz" "$work/healthz")"
    echo "/healthz: HTTP $status: $(cat "$work/healthz")"
    status="$(fetch "http://127.0.0.1:$PORT/metrics" "$work/metrics")"
    echo "/metrics: HTTP $status, $(wc -c <"$work/metrics") bytes, $(grep -vc '^#' "$work/metrics") series"
    echo "series per metric:"
    grep -v '^#' "$work/metrics" | sed -e 's/[{ ].*//' | sort | uniq -c | sort -k2 | sed -e 's/^/  /'
    echo "first lines:"
    head -n 12 "$work/metrics" | cut -c 1-200 | sed -e 's/^/  /'
    if command -v promtool >/dev/null 2>&1; then
        # dcgm-exporter's names break two lint rules on purpose (camelCase labels such as
        # modelName, counters without _total): count the findings rather than list them.
        echo "promtool check metrics (lint, informational), findings by kind:"
        promtool check metrics <"$work/metrics" 2>&1 | sed -e 's/^[^ ]* //' | sort | uniq -c |
            sed -e 's/^/  /' || true
    fi

    local ok=0
    [[ "$status" == 200 ]] || { echo "problem: /metrics answered HTTP $status" && ok=1; }
    grep -q '^DCGM_FI_DEV_GPU_TEMP{' "$work/metrics" ||
        { echo "problem: no DCGM_FI_DEV_GPU_TEMP series" && ok=1; }
    grep -q '^gpuhealth_collector_success{collector="sample"} 1' "$work/metrics" ||
        { echo "problem: the last sample did not succeed" && ok=1; }

    kill -TERM "$pid"
    local rc=0
    wait "$pid" || rc=$?
    if ((rc != 0)); then
        echo "problem: the exporter exited with $rc on SIGTERM (expected a clean 0); log tail:"
        tail -n 20 "$log"
        ok=1
    else
        echo "stopped cleanly on SIGTERM"
    fi
    return "$ok"
}

# --- 4. GPU tests -------------------------------------------------------------------------

step_pytest_gpu() {
    [[ -n "$PY" ]] || return 1
    if [[ "$BACKEND" != nvml ]]; then
        echo "GPU tests need a GPU: skipped with DEVICE_CHECK_BACKEND=$BACKEND"
        return "$SKIP"
    fi
    if ! "$PY" -c 'import pytest' 2>/dev/null; then
        echo "pytest not installed for $PY"
        return "$SKIP"
    fi
    local rc=0
    limited 540 "$PY" -m pytest -m gpu -q -p no:cacheprovider || rc=$?
    if ((rc == 5)); then
        echo "no tests marked gpu were collected"
        return "$SKIP"
    fi
    return "$rc"
}

# --- 5. the stress probes (kernels/) -------------------------------------------------------

step_probes() {
    [[ -n "$PY" ]] || return 1
    local rc=0
    DEVICE_CHECK_BACKEND="$BACKEND" PROBE_BUDGET="${DEVICE_CHECK_PROBE_BUDGET:-55}" SKIP_RC="$SKIP" \
        limited 420 "$PY" - <<'PYTHON' || rc=$?
"""Every probe on every GPU, timed against cuBLAS / CuPy in the same run, plus a fault-injection
run; one table of measured values against the issue's targets (docs/probes.md)."""
import json
import os
import socket
import sys
import time

from kernels.expected import TESTS
from kernels.runner import CUPY_MISSING, run_probes

name = os.environ["DEVICE_CHECK_BACKEND"]
budget = float(os.environ["PROBE_BUDGET"])
skip_rc = int(os.environ["SKIP_RC"])
if name == "nvml":
    try:
        import cupy  # noqa: F401
    except ImportError:
        print(f"skipped: {CUPY_MISSING} (this machine may not reach a package index)")
        sys.exit(skip_rc)
    from collector.backends.nvml import NvmlBackend

    backend = NvmlBackend(hostname=socket.gethostname(), watch_xid=False)
    gpus = backend.gpus()
    backend.close()

    def run(gpu, tests, budget_s, inject):
        return run_probes(gpu.index, tests, budget_s, gpu_uuid=gpu.uuid, model_name=gpu.model_name,
                          inject=inject, baseline=not inject)
else:
    from collector.backends.sim import SimBackend
    from collector.backends.sim import SimProbeRunner

    backend = SimBackend(gpus_per_node=2, seed=7)
    backend.read()
    gpus = backend.gpus()
    runner = SimProbeRunner(backend.fleet, seed=7)

    def run(gpu, tests, budget_s, inject):
        results = runner.run(gpu, tests, budget_s)
        for r in results:  # the sim has no baselines or injection: rehearse the table only
            if inject:
                r.details.update(injected=16 if r.test == "gemm" else 64)
                r.details["injected_found"] = r.details["injected"]
        return results

rows, problems, dump = [], [], []


def check(gpu, what, measured, reference, ratio, target, ok):
    verdict = "n/a" if ok is None else ("ok" if ok else "MISS")
    rows.append((gpu.index, what, measured, reference, ratio, target, verdict))
    if ok is False:
        problems.append(f"GPU {gpu.index}: {what}: {measured} vs {reference} (target {target})")


for gpu in gpus:
    t0 = time.monotonic()
    results = {r.test: r for r in run(gpu, list(TESTS), budget, inject=False)}
    total = time.monotonic() - t0
    injected = {r.test: r for r in run(gpu, ["gemm", "memtest"], min(budget, 30.0), inject=True)}
    dump += [r.to_dict() for r in [*results.values(), *injected.values()]]
    for r in [*results.values(), *injected.values()]:  # injected runs pass when every fault was found
        if r.status != "pass":
            problems.append(f"GPU {gpu.index}: {r.test} {r.status}: {r.details.get('reason', '')}")
    for test, unit, base_key in (("gemm", "TFLOP/s", "baseline_tflops"), ("gemm_fp32", "TFLOP/s", "baseline_tflops"),
                                 ("bandwidth", "GB/s", "baseline_gbps")):
        r = results[test]
        base = r.details.get(base_key)
        ratio = r.details.get("ratio_to_baseline")
        target = ">= 85%" if test in ("gemm", "bandwidth") else "info"
        ok = None if ratio is None or target == "info" else ratio >= 0.85
        check(gpu, f"{test} {unit} vs {r.details.get('baseline', 'baseline')}",
              f"{r.value}", f"{base}", "-" if ratio is None else f"{ratio:.0%}", target, ok)
    for test in ("gemm", "memtest"):
        r = injected[test]
        n, found = r.details.get("injected"), r.details.get("injected_found")
        check(gpu, f"{test}: injected faults found", f"{found}", f"{n}",
              "-" if not n else f"{(found or 0) / n:.0%}", "100%", bool(n) and found == n)
    for test in ("gemm", "gemm_fp32", "memtest", "bandwidth", "pcie"):
        r = results[test]
        check(gpu, f"{test}: errors found (healthy GPU)", f"{r.errors}", "0", "-", "0", r.errors == 0)
    p = results["pcie"]
    check(gpu, "pcie GB/s (h2d / d2h)", f"{p.value}",
          f"{p.details.get('h2d_gbps')} / {p.details.get('d2h_gbps')}", "-", "info", None)
    probe_s = sum(r.duration_s for r in results.values())
    wall = max(total, probe_s)  # the sim reports durations without taking them
    check(gpu, "probe time, all 5 tests (sum of tests / wall incl. start-up)", f"{probe_s:.1f} s",
          f"{wall:.1f} s", "-", "<= 60 s", wall <= 60.0)

widths = [max(len(str(x)) for x in col) for col in zip(("gpu", "check", "measured", "reference", "ratio", "target",
                                                          "result"), *rows)]
header = ("gpu", "check", "measured", "reference", "ratio", "target", "result")
for line in (header, *rows):
    print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "probes.json"), "w") as f:
        json.dump(dump, f, indent=1)
for p in problems:
    print(f"problem: {p}")
sys.exit(1 if problems else 0)
PYTHON
    return "$rc"
}

run_step "1. nvidia-smi" step_nvidia_smi
run_step "2. $BACKEND backend: one reading" step_backend_read
run_step "3. gpuhealth collect --backend $BACKEND: /healthz and /metrics" step_exporter
run_step "4. pytest -m gpu" step_pytest_gpu
run_step "5. stress probes: GEMM, memtest, bandwidth, PCIe" step_probes

printf '\n=== summary ===\n'
printf '%s\n' "${RESULTS[@]}"
if ((FAILED)); then
    echo "DEVICE CHECK FAIL (backend $BACKEND, host $(hostname))"
else
    echo "DEVICE CHECK PASS (backend $BACKEND, host $(hostname))"
fi

if [[ -n "$TEE_PID" ]]; then
    exec >&- 2>&- # let tee see the end of its input and finish writing the report
    wait "$TEE_PID" 2>/dev/null || true
fi
exit "$FAILED"
