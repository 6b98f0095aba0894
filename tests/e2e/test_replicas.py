"""Two extender replicas elect a leader on a real Lease; whatever reaches them, a card is never
double-booked, and when the leader dies the other one takes over."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from devshare.server.extender.serve import SIGSTOP_HOOK
from e2e.cluster import SYSTEM_NS, ControlPlane, Process, free_port, wait_until
from e2e.cluster import extender_bind as _bind
from e2e.conftest import Cluster, allocation


def _holder(cluster: Cluster) -> str:
    lease = cluster.cp.get("lease", "devshare-extender", "-n", SYSTEM_NS)
    return str(lease["spec"].get("holderIdentity") or "")


def test_two_replicas_never_double_book_and_fail_over(cluster: Cluster) -> None:
    cp = cluster.cp
    node = cluster.node("ha-1", gpus=1)
    leader_port = cp.extender_port
    other_port = free_port()
    cp.start_extender(name="extender-b", port=other_port)
    try:
        # pods no kube-scheduler handles (an unknown schedulerName): this test plays kube-scheduler
        pods = []
        for i in range(6):
            p = cluster.pod(f"ha-{i}", {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"},
                            scheduler="e2e-manual")
            pods.append(cluster.get_pod(p["metadata"]["name"]))
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda a: _bind(*a), [
                (port, cluster.ns, p["metadata"]["name"], p["metadata"]["uid"], node)
                for p in pods for port in (leader_port, other_port)]))
        assert answers.count("") == 1, answers  # one 60% share fits the card; nobody else is bound
        assert any("not the leader" in a for a in answers), answers
        bound = [p for p in cluster.pods() if p["metadata"]["name"].startswith("ha-") and p["spec"].get("nodeName")]
        assert len(bound) == 1 and allocation(bound[0])["containers"][0]["devices"][0]["core"] == 60

        # the leader dies: the other replica takes the Lease and binds; still one pod on the card
        assert _holder(cluster) == _identity(cp.processes["extender"])
        cp.processes["extender"].signal(signal.SIGKILL)
        b = _identity(cp.processes["extender-b"])
        wait_until(lambda: _holder(cluster) == b, timeout=60, interval=0.5, what="replica b holding the Lease")
        cp.kubectl("delete", "pod", bound[0]["metadata"]["name"], "-n", cluster.ns, "--grace-period=0", "--force")
        wait_until(lambda: not any(d["pods"] for d in _devices(other_port, node)), what="b sees the card free")
        rest = [p for p in pods if p["metadata"]["name"] != bound[0]["metadata"]["name"]]
        answers = [_bind(other_port, cluster.ns, p["metadata"]["name"], p["metadata"]["uid"], node) for p in rest]
        assert answers.count("") == 1, answers
        bound = [p for p in cluster.pods() if p["metadata"]["name"].startswith("ha-") and p["spec"].get("nodeName")]
        assert len(bound) == 1
    finally:
        cp.processes["extender-b"].stop()
        a = cp.start_extender()  # the session's extender, on its port, leads again once the Lease lapses
        wait_until(lambda: _holder(cluster) == _identity(a), timeout=90, interval=0.5, what="the extender leading")


def _identity(proc: Process) -> str:
    assert proc.popen is not None
    return f"{socket.gethostname()}-{proc.popen.pid}"


def _devices(port: int, node: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/inspect", timeout=10) as r:
        data = json.load(r)
    return [d for n in data["nodes"] if n["name"] == node for d in n["devices"]]


# --- real kube-scheduler replicas, each with its own sidecar extender following its Lease ------------

HA = "e2e-ha-scheduler"  # the replicas' schedulerName and Lease: beside the session's devshare-scheduler
LEASE_SECONDS = (4, 3, 1)  # kube-scheduler's leaseDuration, renewDeadline, retryPeriod (short: failovers)


class Pair:
    """One scheduler pod as deploy/scheduler runs it: kube-scheduler (its hostname the pod's name) and
    the extender beside it with ``--follow-lease``, kube-scheduler talking only to that extender."""

    def __init__(self, cp: ControlPlane, pod_name: str) -> None:
        self.pod = pod_name
        self.port = free_port()
        self.extender = cp.start_extender("--follow-lease", HA, "--pod-name", pod_name,
                                          name=f"{pod_name}-extender", port=self.port)
        config = cp.scheduler_config(self.port, scheduler_name=HA, lease_seconds=LEASE_SECONDS,
                                     file=f"{pod_name}-config.yaml")
        self.scheduler = cp.start_scheduler(name=f"{pod_name}-kube-scheduler", config=config, hostname=pod_name,
                                            standby=True)

    def signal(self, sig: int) -> None:
        for p in (self.scheduler, self.extender):
            p.signal(sig)

    def stop(self) -> None:
        for p in (self.scheduler, self.extender):
            p.stop()

    @property
    def alive(self) -> bool:
        return self.scheduler.alive and self.extender.alive


def _ha_holder(cp: ControlPlane) -> str:
    out = cp.kubectl("get", "lease", HA, "-n", SYSTEM_NS, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def _leader(cp: ControlPlane, pairs: list[Pair]) -> Pair:
    def find() -> Pair | None:
        holder = _ha_holder(cp)
        return next((p for p in pairs if p.alive and holder.startswith(p.pod + "_")), None)
    found: Pair = wait_until(find, timeout=60, interval=0.3, what=f"a live replica holding the {HA} Lease")
    return found


def _core_by_card(cluster: Cluster) -> dict[tuple[str, int], int]:
    used: dict[tuple[str, int], int] = {}
    for p in cluster.pods():
        if not p["spec"].get("nodeName") or "devshare.io/allocation" not in (p["metadata"].get("annotations") or {}):
            continue
        for c in allocation(p)["containers"]:
            for d in c["devices"]:
                card = (p["spec"]["nodeName"], int(d["minor"]))
                used[card] = used.get(card, 0) + int(d["core"])
    return used


@pytest.mark.parametrize("n", [2, 3])
def test_kube_scheduler_replicas_each_with_its_sidecar_fail_over_without_double_booking(
        cluster: Cluster, n: int) -> None:
    """Whichever kube-scheduler is active has its binds served by its own sidecar, through a leader
    SIGSTOPped past its lease (a bind queued in its extender meanwhile is refused when it resumes), a
    killed leader and a graceful failover; no card is ever booked beyond 100%."""
    cp = cluster.cp
    main = cluster.node(f"ha{n}-main", gpus=4)
    frozen_node = cluster.node(f"ha{n}-frozen", gpus=1)
    made = iter(range(100))
    pairs: list[Pair] = []

    def replica() -> Pair:
        pair = Pair(cp, f"devshare-scheduler-{n}x-{next(made)}")
        pairs.append(pair)
        return pair

    def wave(tag: str, count: int = 2, node: str = main, core: str = "30") -> list[str]:
        names = []
        for i in range(count):
            obj = cluster.pod(f"{tag}-{i}", {"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory-ratio": core},
                              scheduler=HA, create=False)
            obj["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
            cp.kubectl("create", "-f", "-", input=json.dumps(obj))
            names.append(obj["metadata"]["name"])
        for name in names:
            cluster.wait_bound(name, timeout=90)
        return names

    try:
        for _ in range(n):
            replica()
        leader = _leader(cp, pairs)
        bound = wave("start")

        # SIGSTOP of the whole leading pod past its lease; a bind waits in its extender's socket meanwhile
        queued = cluster.pod("queued", {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"},
                             scheduler="e2e-manual")
        queued = cluster.get_pod("queued")
        leader.signal(signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(_bind, leader.port, cluster.ns, "queued", queued["metadata"]["uid"], frozen_node)
            try:
                new = _leader(cp, [p for p in pairs if p is not leader])
                bound += wave("during-stop", count=1, node=frozen_node, core="60")  # 60% of the frozen node's card
            finally:
                leader.signal(signal.SIGCONT)
            assert answer.result(timeout=60).startswith("not the leader"), answer.result()
        # the resumed kube-scheduler finds its lease lost and exits, as in a pod (which is replaced)
        wait_until(lambda: not leader.scheduler.alive, timeout=60, what="the deposed kube-scheduler exiting")
        leader.stop()
        replica()
        assert _leader(cp, pairs) is new
        bound += wave("after-stop")

        # SIGKILL of the leading pod: nothing released; another replica takes over once the lease lapses
        killed = _leader(cp, pairs)
        killed.signal(signal.SIGKILL)
        killed.stop()
        replica()
        assert _leader(cp, pairs) is not killed
        bound += wave("after-kill")

        # graceful failover: kube-scheduler releases its Lease on SIGTERM, the next takes over
        stepping = _leader(cp, pairs)
        stepping.stop()
        assert _leader(cp, pairs) is not stepping
        bound += wave("after-term")
    finally:
        for p in pairs:
            p.stop()
    assert len(bound) == 9
    assert not cluster.get_pod("queued")["spec"].get("nodeName")
    used = _core_by_card(cluster)
    assert used[(frozen_node, 0)] == 60, used  # not 120: the deposed replica's queued bind was refused
    assert all(v <= 100 for v in used.values()), used
    assert sum(used.values()) == 8 * 30 + 60


# --- two extenders that both lead: only the claim ledger keeps them from booking one card twice ------

def _stopped(proc: Process) -> bool:
    assert proc.popen is not None
    with open(f"/proc/{proc.popen.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_two_extenders_that_both_lead_never_book_one_card_twice(cluster: Cluster) -> None:
    """Two extender processes, neither electing a leader (two run by hand, or one paused past its
    lease): extender a is stopped (SIGSTOP, by its test hook) between its fence and its write, with
    its devices chosen; extender b binds a conflicting pod to the same card meanwhile; a resumes.
    Then both are asked to bind conflicting pods at the same moment, many times. At most one pod wins
    each card: the second writer of the claim ledger finds the first's claim and refuses."""
    cp = cluster.cp
    node = cluster.node("both-1", gpus=1)
    cards = cluster.node("both-2", gpus=2)
    ask = {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"}
    first, second = (cluster.get_pod(cluster.pod(name, ask, scheduler="e2e-manual")["metadata"]["name"])
                     for name in ("both-a", "both-b"))
    port_a, port_b = free_port(), free_port()
    a = cp.start_extender("--no-leader-elect", name="extender-both-a", port=port_a,
                          env={SIGSTOP_HOOK: f"{cluster.ns}/{first['metadata']['name']}"})
    b = cp.start_extender("--no-leader-elect", name="extender-both-b", port=port_b)
    try:
        with ThreadPoolExecutor(1) as pool:
            paused = pool.submit(_bind, port_a, cluster.ns, first["metadata"]["name"], first["metadata"]["uid"], node)
            wait_until(lambda: _stopped(a), timeout=30, interval=0.05, what="extender a stopping before its claim")
            assert _bind(port_b, cluster.ns, second["metadata"]["name"], second["metadata"]["uid"], node) == ""
            a.signal(signal.SIGCONT)
            answer = paused.result(timeout=60)
        assert "does not fit on node both-1 beside the claims in the claim ledger" in answer, answer
        assert not cluster.get_pod(first["metadata"]["name"])["spec"].get("nodeName")
        assert _core_by_card(cluster)[(node, 0)] == 60

        # both at once, over and over: pairs of 60% pods on a node of two cards
        won = 0
        for i in range(4):
            pair = [cluster.get_pod(cluster.pod(f"both-{i}-{k}", ask, scheduler="e2e-manual")["metadata"]["name"])
                    for k in range(3)]
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda x: _bind(*x), [
                    (port, cluster.ns, p["metadata"]["name"], p["metadata"]["uid"], cards)
                    for p, port in zip(pair, (port_a, port_b, port_a), strict=True)]))
            won += answers.count("")
            used = _core_by_card(cluster)
            assert all(v <= 100 for v in used.values()), (used, answers)
            assert all(not x or "claim" in x or "does not fit" in x for x in answers), answers
            for p in pair:  # free the cards for the next round (the extenders see the pods go)
                cp.kubectl("delete", "pod", p["metadata"]["name"], "-n", cluster.ns, "--grace-period=0", "--force")
            wait_until(lambda: not any(d["pods"] for port in (port_a, port_b) for d in _devices(port, cards)),
                       timeout=30, what="both extenders seeing the cards free")
        assert won >= 4  # each round at least one pod got a card
    finally:
        a.stop()
        b.stop()
