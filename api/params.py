"""Path and query parameters that several routes share."""

from typing import Annotated

from fastapi import Path, Query

Uuid = Annotated[str, Path(min_length=1, max_length=200, description="GPU UUID, e.g. GPU-5f0c…")]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=10_000_000)]
