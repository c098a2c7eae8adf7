"""A read-only mapping that a pandas frame's `attrs` can carry without copying it (no pandas here: the
collector imports `core.infiniband`, which uses it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Self


class SharedMap(Mapping[str, str]):
    """GPU UUID -> a text, read-only and shared. pandas deep-copies a frame's attrs into every frame and
    column taken from it: a dict of 10,000 names made a feature build 0.24 -> 0.43 s and cost 6 ms a
    column; this one is never copied (`__deepcopy__` returns it) and compares equal to itself at once."""

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._items = dict(items)

    def __getitem__(self, uuid: str) -> str:
        return self._items[uuid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        return self  # immutable: shared

    def __eq__(self, other: object) -> bool:
        return other is self or super().__eq__(other)  # pandas compares attrs at each concat: the same is equal

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"
