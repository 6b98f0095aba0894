"""The agent's checkpoint: what it handed out for stand-ins, and the pod writes it still owes.

When an ``Allocate`` call matches several identical pending pods, the agent serves it with the
devices of one of them, the stand-in (:mod:`devshare.agent.matching`), and records a
:class:`Handout`: the call's resource and kubelet's device ids, and whose devices went out. kubelet
then records in its own checkpoint which pod those ids went to; the agent resolves the handout
against it and, when the pod is not the stand-in, owes two writes (a trade,
:mod:`devshare.model.trade`) and later the pod's ``devshare.io/assigned`` mark: :class:`Write`
values, applied in order. Both lists are saved to a file (write-ahead: before the Allocate answer
leaves) so that an agent restart between an Allocate and its trade loses nothing.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import msgspec

log = logging.getLogger("devshare.agent.journal")

DEFAULT_PATH = Path("/var/lib/devshare/agent-checkpoint.json")
VERSION = 1
MARK = "assigned"  # the ``why`` of a mark write


class Handout(msgspec.Struct, frozen=True, kw_only=True):
    """An Allocate served with a stand-in's devices, not yet matched to its pod."""

    resource: str
    ids: tuple[str, ...]  # kubelet's device ids of the call, sorted
    standin: str  # uid of the pod whose devices were handed out
    container: str
    at: float  # wall-clock seconds


class Write(msgspec.Struct, frozen=True, kw_only=True):
    """A merge patch of one pod's annotations the agent owes (a trade's leg, or a mark)."""

    uid: str
    namespace: str
    name: str
    annotations: dict[str, str | None]
    why: str  # for the log: "trade with ns/name", or MARK


class State(msgspec.Struct, kw_only=True):
    version: int = VERSION
    handouts: list[Handout] = msgspec.field(default_factory=list)
    writes: list[Write] = msgspec.field(default_factory=list)


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(State).decode


class Journal:
    """The state, kept in memory and saved to ``path`` (None: memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.state = State()
        if path is not None:
            self.state = self._load(path)
        self._saved = b""  # the first save writes (a fresh file, or one rid of writes made before)

    @staticmethod
    def _load(path: Path) -> State:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return State()
        try:
            state = _decode(data)
        except msgspec.DecodeError as e:
            log.error("ignoring the unreadable agent checkpoint %s (%s): trades in flight are lost", path, e)
            return State()
        if state.version != VERSION:
            log.error("ignoring the agent checkpoint %s of version %s (this agent reads %s)", path, state.version,
                      VERSION)
            return State()
        return state

    @property
    def handouts(self) -> list[Handout]:
        return self.state.handouts

    @property
    def writes(self) -> list[Write]:
        return self.state.writes

    def save(self) -> None:
        """Write the state when its handouts or trade writes changed (atomically: a temporary file
        renamed over the old one). Marks alone are not worth a write (a mark lost with a restart
        leaves an informational annotation unset, as before trades existed); writes already made
        may stay in the file: made again after a restart, they change nothing. No fsync: the file
        must survive the agent's restarts, which the page cache does (a node that crashes restarts
        its pods anyway)."""
        key = _encode(State(version=self.state.version, handouts=self.state.handouts,
                            writes=[w for w in self.state.writes if w.why != MARK]))
        if key == self._saved or self.path is None:
            self._saved = key
            return
        data = _encode(self.state)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".agent-checkpoint-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._saved = key
