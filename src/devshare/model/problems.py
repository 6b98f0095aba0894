"""A collector of problems found while reading a pod: the readers keep going after the first one,
so that validation reports all of them, and :func:`devshare.model.pod.parse_pod` raises them."""

from __future__ import annotations

from devshare.model.errors import InvalidRequest


class Problems:
    """Problems found so far, each an :class:`InvalidRequest` naming where it is."""

    def __init__(self) -> None:
        self.items: list[InvalidRequest] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(InvalidRequest(message, field=where))

    def extend(self, where: str, messages: list[str]) -> None:
        for m in messages:
            self.add(where, m)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def messages(self) -> list[str]:
        return [str(p) for p in self.items]

    def raise_if_any(self) -> None:
        """Raise the problem found (all of them, in one error, when there are several)."""
        if not self.items:
            return
        if len(self.items) == 1:
            raise self.items[0]
        raise InvalidRequest(f"{len(self.items)} problems: " + "; ".join(self.messages()))
