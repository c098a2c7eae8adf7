"""`gpuhealth serve` with its in-process collector on live GPUs (the small install) reads what `collect` reads
beyond the GPU: the kernel log's XIDs and SXIDs and the InfiniBand/RoCE ports."""

from __future__ import annotations

from pathlib import Path

from collector.kernel_log_source import KernelLogOptions
from core import catalog
from core.infiniband import PREFIX
from core.kernel_log import XID
from predictor.score import load_model
from service.assemble import LoopConfig, build_loops
from store import Store
from tests.collector import sysfs_ib
from tests.collector.helpers import ScriptedBackend
from tests.collector.test_kmsg import xid_record


def test_a_live_backend_reads_the_kernel_log_and_the_ports(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(xid_record(7, gpu_bus=0x18, code=120))
    config = LoopConfig(
        fields=list(catalog.select("default")),
        interval_s=1.0,
        kernel_log=KernelLogOptions(str(log), str(tmp_path / "cursor")),
        sysfs_root=sysfs_ib.build(tmp_path / "sys"),
    )
    store = Store.open(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        loops = build_loops(store, load_model(), config, backend=ScriptedBackend())
        assert loops.kernel_log is not None and loops.sampler is not None and loops.registry is not None
        loops.sampler.sample_once()
        latest = loops.sampler.latest
        assert latest is not None
        assert [r.values.get("xid") for r in latest.readings] == [120.0, 0.0]  # the log's, NVML saw none
        names = {m.name for m in loops.registry.collect()}
        assert XID.removesuffix("_total") in names
        assert any(n.startswith(PREFIX) for n in names), sorted(names)
    finally:
        store.close()


def test_without_a_kernel_log_or_sysfs_nothing_more_is_read(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        config = LoopConfig(fields=list(catalog.select("default")), interval_s=1.0)
        loops = build_loops(store, load_model(), config, backend=ScriptedBackend())
        assert loops.kernel_log is None and loops.registry is not None
        names = {m.name for m in loops.registry.collect()}
        assert XID.removesuffix("_total") not in names and not any(n.startswith(PREFIX) for n in names)
    finally:
        store.close()
