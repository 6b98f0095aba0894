"""The upkeep of the claim ledger (:mod:`devshare.server.extender.claims`): claims of binds that are done
leave it, claims of binds that never completed expire.

Periodically, every replica reads the ledger again: at each sweep while it could not be read (an error
of the API server, a ConfigMap holding garbage: once repaired or deleted it is used again within one
sweep), when it holds claims the watch has not confirmed for a while, and every :data:`REREAD` seconds.
The leader removes the claims of pods bound (as the watch or a list of pods shows them: after a restart
too), gone or finished, and those of pods that did not bind within the claims' TTL, after writing the
expiry annotation on each such pod (:meth:`~devshare.kube.ledger.ClaimLedger.expire`: a Binding of the
claim's writer still on its way then fails on the pod's resourceVersion). A claim's age is counted by
this replica's clock, from when it first saw the claim (:meth:`Claims.age`): a writer's clock that runs
ahead cannot keep a claim forever.
"""

from __future__ import annotations

import logging

from devshare.kube.errors import BackendError
from devshare.kube.ledger import Claim, Ledger
from devshare.server.extender.claims import STUB_RECHECK, Behind, Claims, Contended

log = logging.getLogger(__name__)

REREAD = 30.0  # seconds after which every replica reads the ledger again, whatever it holds


class ClaimSweep:
    def __init__(self, claims: Claims) -> None:
        self.claims = claims

    async def sweep(self, *, leading: bool) -> None:
        """Periodically: read the ledger again when it holds claims the watch has not confirmed for a
        while (any replica), and (``leading``) remove the claims of pods bound, gone or finished and of
        pods that did not bind within ``ttl`` (after the expiry annotation, see the module's doc)."""
        book = self.claims
        now = book.clock()
        if (book.current is None or book.current.error is not None or now - book.read_at > REREAD
                or any(now - since > STUB_RECHECK for _, since in book.stubs.values())):
            async with book.lock:
                try:
                    await book.read()
                except BackendError as e:
                    log.info("re-reading the claim ledger failed: %s", e)
        if not leading or book.current is None or book.current.error is not None:
            return
        claims = list(book.current.claims.values())
        done = [c for c in claims if book.gone(c) or book.seen_bound(c) is not None]
        old = [c for c in claims if c not in done and book.age(c, now) > book.ttl and not self._bound_here(c)]
        if not done and not old:
            return
        expired = [c for c in old if await book.ledger.expire(c, now=book.clock())]
        if done or expired:
            await self._remove(expired)

    def _bound_here(self, c: Claim) -> bool:
        """The watch has the claim's pod bound on its node with this allocation: a live claim."""
        rec = self.claims.state.pods.get(c.pod)
        return (rec is not None and rec.phase == "bound" and c.pod not in self.claims.stubs
                and rec.allocation == c.allocation and rec.pod.uid in ("", c.uid))

    async def _remove(self, expired: list[Claim]) -> None:
        """Remove ``expired`` (each only if it is still the same claim) and the claims of pods bound, gone
        or finished from the ledger."""
        removed: list[str] = []

        def change(ledger: Ledger) -> tuple[dict[str, Claim], str] | None:
            if ledger.error is not None:
                return None
            claims, watermark, _, _ = self.claims.decide(ledger, [])
            keep = {k: c for k, c in claims.items() if c not in expired}
            if len(keep) == len(ledger.claims):
                return None
            removed[:] = sorted(set(ledger.claims) - set(keep))
            return keep, watermark

        async with self.claims.lock:
            try:
                if await self.claims.swap(change) is not None:
                    self.claims.counters.pruned += len(removed)
                    log.info("released %d claim(s) of pods bound, gone, finished or never bound: %s",
                             len(removed), ", ".join(removed))
            except (BackendError, Contended, Behind) as e:
                if isinstance(e, BackendError):
                    self.claims.current = None
                log.info("pruning the claim ledger failed: %s", e)
