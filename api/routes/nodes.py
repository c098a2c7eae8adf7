"""Nodes: one node and its GPUs."""

from typing import Annotated

from fastapi import APIRouter, Path

from api import schemas
from api.deps import StoreDep
from store import Node

reads = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@reads.get("/{hostname}", response_model=schemas.NodeDetail)
def get_node(store: StoreDep, hostname: Annotated[str, Path(min_length=1, max_length=255)]) -> Node:
    """A node and its GPUs."""
    return store.get_node(hostname)
