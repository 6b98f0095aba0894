"""The claim ledger's watermark (server/extender/watermark.py): a resourceVersion read as the number it
is, and a write that waits for this replica's watch of pods to reach the watermark, or says it is behind."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.server.extender.watermark import Behind, caught_up, reached, version_number
from support.waiting import settled


class Watch:
    """A watch of pods at ``versions[0]``, moving on to the next version each time it is read."""

    def __init__(self, *versions: str | None) -> None:
        self.versions = list(versions)
        self.reads = 0

    def watch_version(self) -> str | None:
        self.reads += 1
        return self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]


@given(st.integers(min_value=0, max_value=10**30))
def test_a_resource_version_is_read_as_its_number(n: int) -> None:
    assert version_number(str(n)) == n


@given(st.text())
def test_anything_but_ascii_digits_is_no_number(text: str) -> None:
    """Never an exception, never a misreading: etcd's revisions are ASCII digits, and only those count."""
    expected = int(text) if text and all("0" <= c <= "9" for c in text) else None
    assert version_number(text) == expected


def test_no_version_and_other_digits_are_no_number() -> None:
    assert version_number(None) is None and version_number("") is None
    assert version_number("²") is None  # str.isdigit() says yes; int() raises
    assert version_number("١٢") is None  # Arabic-Indic digits: int() would read 12


def test_reached_compares_numbers_not_strings() -> None:
    assert reached(Watch("10"), 9) and reached(Watch("10"), 10)  # "10" < "9" as strings
    assert not reached(Watch("9"), 10)
    assert not reached(Watch(None), 1) and not reached(Watch("not-a-number"), 1)


async def test_a_watch_already_there_returns_at_once() -> None:
    watch = Watch("120")
    await caught_up(watch, "100", 0.0, "in ConfigMap devshare-claims")  # type: ignore[arg-type]
    assert watch.reads == 1


async def test_a_watermark_that_is_no_number_waits_for_nothing() -> None:
    watch = Watch(None)
    await caught_up(watch, "", 0.0, "here")  # type: ignore[arg-type]
    assert watch.reads == 0  # an empty ledger has no watermark: nothing to wait for


async def test_it_returns_once_the_watch_reaches_the_watermark() -> None:
    watch = Watch("90", "95", "99", "100", "101")
    await settled(caught_up(watch, "100", 120.0, "here"))  # type: ignore[arg-type]
    assert watch.reads == 4  # read until it reached 100, not beyond


async def test_a_watch_left_behind_says_where_and_what_happens_next() -> None:
    with pytest.raises(Behind) as e:
        await caught_up(Watch("90"), "100", 0.0, "in ConfigMap devshare-system/devshare-claims")  # type: ignore[arg-type]
    assert str(e.value) == ("this replica's watch of pods is at resourceVersion 90, behind the claim ledger's "
                            "watermark 100 (in ConfigMap devshare-system/devshare-claims); it binds again once "
                            "its watch catches up")
    with pytest.raises(Behind, match="at resourceVersion none, behind"):
        await caught_up(Watch(None), "100", 0.0, "here")  # type: ignore[arg-type]
