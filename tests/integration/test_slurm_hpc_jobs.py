"""Slurm jobs on the collector's series: deploy/slurm's prolog and epilog on a real Slurm cluster.

slurmd runs prolog-gpuhealth.sh when a GPU job is allocated and epilog-gpuhealth.sh when it ends;
they write and remove dcgm-exporter's HPC job mapping files, and `gpuhealth collect
--hpc-job-mapping-dir` (the sim backend, whose GPUs 0 and 1 stand for the node's two) puts
`hpc_job="<id>"` on the series of the GPUs the job holds, for as long as it holds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import REPO_ROOT, Service, poll, start_exporter
from tests.integration.slurm_cluster import SlurmCluster, start_slurm_cluster

pytestmark = pytest.mark.integration

SCRIPTS = REPO_ROOT / "deploy" / "slurm"
LONG_JOB = "sleep 60"
"""Held until the test cancels it."""


@dataclass(frozen=True)
class Stack:
    """A one-node Slurm cluster with gpuhealth's prolog and epilog, and a collector reading their files."""

    cluster: SlurmCluster
    collector: Service
    mapping_dir: Path

    def services(self) -> list[Service]:
        return [*self.cluster.services(), self.collector]

    def jobs_by_gpu(self) -> dict[str, set[str]]:
        """gpu label -> the hpc_job labels on its DCGM_FI_DEV_GPU_TEMP series ("" for a series without one)."""
        out: dict[str, set[str]] = {}
        for fam in text_string_to_metric_families(self.collector.get("/metrics")):
            if fam.name == "DCGM_FI_DEV_GPU_TEMP":
                for s in fam.samples:
                    out.setdefault(s.labels["gpu"], set()).add(s.labels.get("hpc_job", ""))
        return out

    def mapping(self) -> dict[str, str]:
        """The mapping files and what they hold."""
        if not self.mapping_dir.is_dir():
            return {}
        return {p.name: p.read_text() for p in sorted(self.mapping_dir.iterdir()) if not p.name.startswith(".")}


def _wrapper(path: Path, script: Path, mapping_dir: Path) -> str:
    """slurm.conf's Prolog/Epilog: the shipped script with the mapping directory set, as the script's header says."""
    path.write_text(f"#!/bin/sh\nGPUHEALTH_HPC_JOB_MAPPING_DIR={mapping_dir}\nexport GPUHEALTH_HPC_JOB_MAPPING_DIR\n"
                    f"exec /bin/sh {script}\n")  # fmt: skip
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("slurm-jobs")
    mapping_dir = workdir / "hpc-jobs"  # created by the first prolog: the collector starts without it
    prolog = _wrapper(workdir / "prolog.sh", SCRIPTS / "prolog-gpuhealth.sh", mapping_dir)
    epilog = _wrapper(workdir / "epilog.sh", SCRIPTS / "epilog-gpuhealth.sh", mapping_dir)
    with start_slurm_cluster(workdir / "cluster", nodes=1, prolog=prolog, epilog=epilog, gpu_devices=True) as cluster:
        collector = start_exporter(workdir, "--hpc-job-mapping-dir", str(mapping_dir))
        try:
            yield Stack(cluster, collector, mapping_dir)
        finally:
            collector.proc.terminate()
            collector.proc.wait(timeout=10)


def wait_running(cluster: SlurmCluster, job: str) -> None:
    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 15, f"job {job} RUNNING")


def test_a_jobs_gpus_carry_its_id_while_it_runs(stack: Stack) -> None:
    cluster = stack.cluster
    assert stack.mapping() == {}
    before = poll("collector serving", stack.jobs_by_gpu, lambda j: "0" in j)
    assert before["0"] == {""} and before["1"] == {""}, "no job, no hpc_job label"

    first = cluster.submit(LONG_JOB, extra=["--gres=gpu:h100:1"])
    wait_running(cluster, first)
    # The prolog saw SLURM_JOB_GPUS (a real GPU node's variable; the fixture's device nodes make Slurm set it).
    cluster.wait_for(lambda: stack.mapping() == {"0": f"{first}\n"}, 15, f"prolog of job {first}")
    jobs = poll(f"hpc_job={first} on GPU 0", stack.jobs_by_gpu, lambda j: j.get("0") == {first})
    assert jobs["1"] == {""}

    second = cluster.submit(LONG_JOB, extra=["--gres=gpu:1"])
    wait_running(cluster, second)
    cluster.wait_for(lambda: stack.mapping() == {"0": f"{first}\n", "1": f"{second}\n"}, 15, f"prolog of job {second}")
    poll(f"hpc_job={second} on GPU 1", stack.jobs_by_gpu, lambda j: j.get("1") == {second} and j["0"] == {first})

    # The first job ends: the epilog takes it out, its GPU's series lose the label, the other job's keep it.
    cluster.run("scancel", first)
    cluster.wait_for(lambda: stack.mapping() == {"1": f"{second}\n"}, 20, f"epilog of job {first}")
    poll(f"no hpc_job on GPU 0 after job {first}", stack.jobs_by_gpu, lambda j: j.get("0") == {""})
    assert stack.jobs_by_gpu()["1"] == {second}

    cluster.run("scancel", second)
    cluster.wait_for(lambda: stack.mapping() == {}, 20, f"epilog of job {second}")
    poll("no hpc_job anywhere", stack.jobs_by_gpu, lambda j: j.get("0") == {""} and j.get("1") == {""})
    metrics = stack.collector.get("/metrics")
    assert 'gpuhealth_collector_success{collector="hpc_job"} 1.0' in metrics
    stack.collector.assert_alive()


def test_a_job_without_gpus_writes_nothing(stack: Stack) -> None:
    cluster = stack.cluster
    cluster.reset()
    job = cluster.submit("sleep 2")
    wait_running(cluster, job)
    assert stack.mapping() == {}
    cluster.wait_for(lambda: cluster.job_state(job) == "COMPLETED", 15, f"job {job} COMPLETED")
    assert stack.mapping() == {}
