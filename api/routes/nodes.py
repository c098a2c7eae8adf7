"""Nodes: one node and its GPUs."""

from typing import Annotated, Any

from fastapi import APIRouter, Path

from api import schemas
from api.deps import StoreDep
from api.errors import problem

reads = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@reads.get("/{hostname}", response_model=schemas.NodeDetail, responses={404: problem("no such node")})
def get_node(store: StoreDep, hostname: Annotated[str, Path(min_length=1, max_length=255)]) -> dict[str, Any]:
    """A node, its GPUs, and the pods or Slurm jobs on each (what a demote or drain of it affects)."""
    node = store.gpus.node(hostname)
    return {**node, "workloads": store.workloads.of([g["uuid"] for g in node["gpus"]])}
