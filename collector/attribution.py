"""Which workload holds each GPU, as dcgm-exporter's labels on the GPU's series.

Two sources, each an `Attributor` the sampler asks once per sample (its answer travels in the
snapshot, so a scrape never waits on it):

- Kubernetes: the kubelet's pod-resources API (`collector.podresources.client`) gives `pod`,
  `namespace` and `container` of the container each GPU or MIG device was handed to.
- Slurm: dcgm-exporter's `--hpc-job-mapping-dir`, a directory with one file per GPU (`0`, `1`, …)
  or MIG instance (`<gpu>.<GPU instance ID>`) holding the ids of the jobs on it, one a line,
  written by a Slurm prolog and removed by the epilog (deploy/slurm/); gives `hpc_job`.

A GPU held by several workloads gets one series per workload, as dcgm-exporter does for several
jobs on one GPU. A source that fails gives no labels for that sample, never a failed scrape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from collector.backends.base import GpuReading

DeviceKey = tuple[str, int | None]
"""(GPU UUID, GPU instance ID): a whole GPU has None, a MIG instance its GPU_I_ID."""
LabelSet = Mapping[str, str]
Workloads = Mapping[DeviceKey, tuple[LabelSet, ...]]
"""The label sets of the workloads on each device; a device without any is absent."""

POD_LABELS = ("pod", "namespace", "container")
"""dcgm-exporter's labels for the Kubernetes container holding a GPU (its default, not `pod_name`...)."""
HPC_JOB_LABEL = "hpc_job"
"""dcgm-exporter's label for the HPC (Slurm) job on a GPU."""
MAPPING_FILE = re.compile(r"(\d+)(?:\.(\d+))?")
"""dcgm-exporter's names of mapping files: a GPU index, or `<GPU index>.<GPU instance ID>` (MIG)."""


class AttributionError(RuntimeError):
    """A source of workloads could not be read; the message is one line an operator can act on."""


class Attributor(Protocol):
    """A source of workloads per device."""

    name: str
    """Its collector name in gpuhealth_collector_success{collector}."""
    source: str
    """What it reads (a socket, a directory), for the start-up line."""

    def lookup(self, readings: Sequence[GpuReading]) -> dict[DeviceKey, list[dict[str, str]]]:
        """The workloads on the GPUs (and MIG instances) of `readings`; raises AttributionError."""
        ...


def merge(found: Iterable[Mapping[DeviceKey, Sequence[LabelSet]]]) -> dict[DeviceKey, tuple[LabelSet, ...]]:
    """The workloads of several sources together; where two sources name workloads of one device (a
    Slurm job inside a pod), each label set of one is joined with each of the other."""
    out: dict[DeviceKey, tuple[LabelSet, ...]] = {}
    for source in found:
        for key, sets in source.items():
            unique = tuple(dict.fromkeys(tuple(sorted(s.items())) for s in sets))
            mine = tuple(dict(items) for items in unique)
            if not mine:
                continue
            have = out.get(key)
            out[key] = mine if have is None else tuple({**a, **b} for a in have for b in mine)
    return out


class HpcJobAttributor:
    """Slurm jobs from dcgm-exporter's HPC job mapping directory (`--hpc-job-mapping-dir`)."""

    name = "hpc_job"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.source = str(self.directory)

    def lookup(self, readings: Sequence[GpuReading]) -> dict[DeviceKey, list[dict[str, str]]]:
        """Each mapping file's non-blank lines are job ids on the GPU (or MIG instance) it names."""
        try:
            entries = [e for e in os.scandir(self.directory) if MAPPING_FILE.fullmatch(e.name)]
        except FileNotFoundError:
            raise AttributionError(f"HPC job mapping directory {self.directory} does not exist") from None
        except OSError as err:
            raise AttributionError(f"reading HPC job mapping directory {self.directory}: {err}") from err
        uuids = {r.info.index: r.info.uuid for r in readings}
        out: dict[DeviceKey, list[dict[str, str]]] = {}
        for entry in entries:
            m = MAPPING_FILE.fullmatch(entry.name)
            uuid = uuids.get(int(m[1])) if m else None
            if m is None or uuid is None:
                continue
            jobs = _job_ids(Path(entry.path))
            if jobs:
                key = (uuid, int(m[2]) if m[2] is not None else None)
                out[key] = [{HPC_JOB_LABEL: job} for job in jobs]
        return out


def _job_ids(path: Path) -> list[str]:
    """The job ids in one mapping file; none when it is gone (an epilog removed it meanwhile) or not a file."""
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return []
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))
