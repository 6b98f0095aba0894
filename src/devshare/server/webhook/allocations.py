"""Who may write an allocation: the annotations that say where a pod's devices are
(:func:`devshare.model.dialects.is_allocation_annotation`) are devshare's to write. The extender writes
them with the Binding (``pods/binding``, which no pod webhook sees) and the node agent marks pods
assigned; anyone else who creates a pod carrying them, or changes them on an existing pod, is
refused. A pod created with ``spec.nodeName`` and an allocation of its own would otherwise be
counted on its card (issue 12: GPU 0 at 165%).

The writers are usernames (``system:serviceaccount:<namespace>:<name>`` for ServiceAccounts), by
default devshare's own extender, ``devshare-scheduler`` in ``devshare-system`` (``devshare webhook
--allocation-writer`` replaces it). The node agent (``devshare-agent``, ``--allocation-trader``) is a
*trader*: it may set its marks (``devshare.io/assigned``, ``ALIYUN_COM_GPU_MEM_ASSIGNED``) and make
trades (:mod:`devshare.model.trade`), nothing else: a change of a pod's allocation tagged
``devshare.io/trade: <partner uid>`` where the partner is a pod of the same namespace and node, both
ask for the same thing and are no group members, and the change is an exchange: the pod takes the
partner's allocation as it stands (the first write), or the partner already took this pod's and
this pod takes one of the same shape (the second; the scheduler applies the two together only
when they exchange exactly what they held, :mod:`devshare.kube.trades`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from devshare.model import trade
from devshare.model.codecs import decode_allocation
from devshare.model.dialects import is_allocation_annotation
from devshare.model.errors import InvalidInput

SYSTEM_NAMESPACE = "devshare-system"
DEFAULT_WRITERS = (f"system:serviceaccount:{SYSTEM_NAMESPACE}:devshare-scheduler",)
DEFAULT_TRADERS = (f"system:serviceaccount:{SYSTEM_NAMESPACE}:devshare-agent",)
REASON = "allocation-write"  # the rejections metric's reason class


def allocation_annotations(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and is_allocation_annotation(k)}


def _meta(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def _annotations(obj: Any) -> dict[str, Any]:
    annotations = _meta(obj).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _node(obj: Any) -> str:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return str(spec.get("nodeName") or "") if isinstance(spec, dict) else ""


def trade_partner(operation: str, username: str, obj: Any, old: Any, traders: Collection[str]) -> str | None:
    """The partner uid of this UPDATE when it is a trader's trade write, whose partner the webhook
    must look up (:func:`refuse_trade`); None otherwise."""
    if operation != "UPDATE" or username not in traders:
        return None
    partner = _annotations(obj).get(trade.TRADE)
    if not isinstance(partner, str) or not partner or not _node(obj):
        return None
    new, before = allocation_annotations(obj), allocation_annotations(old)
    changed = {k for k in new.keys() | before.keys() if new.get(k) != before.get(k)}
    return partner if changed - set(trade.MARKS) else None


def _containers(obj: Any) -> list[Any]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return []
    return [(c.get("name"), c.get("resources")) for key in ("initContainers", "containers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def refuse_trade(obj: Any, old: Any, partners: list[dict[str, Any]] | None) -> str | None:
    """Why this trade write of a pod may not go through (None when it may); ``partners``: the pods
    of its namespace on its node (None: the webhook cannot look them up)."""
    annotations = _annotations(obj)
    partner_uid = str(annotations.get(trade.TRADE) or "")
    uid, node = str(_meta(obj).get("uid") or ""), _node(obj)
    if not partner_uid:
        return (f"the node agent may only set {', '.join(trade.MARKS)}, or trade this pod's allocation with an "
                f"identical pod of its node ({trade.TRADE}: <partner uid>)")
    new, before = allocation_annotations(obj), allocation_annotations(old)
    changed = sorted(k for k in new.keys() | before.keys() if new.get(k) != before.get(k))
    foreign = [k for k in changed if k not in trade.MARKS and not trade.is_traded(k)]
    if foreign:
        return f"a trade exchanges allocations, not {', '.join(foreign)}"
    if partners is None:
        return ("the webhook cannot look up the trade's partner pod: run it with --kubeconfig or --in-cluster "
                "(and RBAC to list pods)")
    partner = next((p for p in partners if str(_meta(p).get("uid") or "") == partner_uid), None)
    if partner is None or _node(partner) != node or partner_uid == uid:
        return f"the trade's partner {partner_uid} is not another pod of namespace {_meta(obj).get('namespace')} " \
               f"on node {node}"
    theirs = _annotations(partner)
    try:
        a_new, a_old, b_now = decode_allocation(annotations), decode_allocation(_annotations(old)), \
            decode_allocation(theirs)
    except InvalidInput as e:
        return f"the traded allocations do not decode: {e}"
    if a_new is None or a_old is None or b_now is None:
        return "both pods of a trade must hold a devshare allocation"
    if _containers(obj) != _containers(partner) or trade.in_group(_meta(obj).get("labels") or {}, annotations) \
            or trade.in_group(_meta(partner).get("labels") or {}, theirs) \
            or not trade.interchangeable(a_old, b_now, _annotations(old), theirs):
        return f"only identical pods trade, and {_meta(partner).get('name')} asks for something else"
    if trade.traded(annotations) == trade.traded(theirs):
        return None  # the first write: this pod takes the partner's allocation as it stands
    if (str(theirs.get(trade.TRADE) or "") == uid and trade.traded(theirs) == trade.traded(_annotations(old))
            and trade.shape(a_new) == trade.shape(a_old)):
        return None  # the second: the partner took this pod's, this pod takes the partner's former one
    return f"the new allocation is not an exchange with {_meta(partner).get('name')}'s"


def refuse_allocation_write(operation: str, username: str, obj: Any, old: Any,
                            writers: Collection[str], traders: Collection[str] = (),
                            partners: list[dict[str, Any]] | None = None) -> str | None:
    """Why this CREATE or UPDATE of a pod may not go through (None when it may). ``traders`` may set
    their marks and make trades (``partners``: the pods of the namespace on the pod's node)."""
    if username in writers or operation not in ("CREATE", "UPDATE"):
        return None
    new = allocation_annotations(obj)
    if operation == "CREATE":
        if not new:
            return None
        return (f"annotation(s) {', '.join(sorted(new))} may only be written by devshare ({', '.join(writers)}), "
                f"not by {username or 'an anonymous user'}: they say which devices the pod holds, and devshare "
                "writes them itself when it binds the pod. Create the pod without them (and without spec.nodeName)")
    before = allocation_annotations(old)
    changed = sorted(k for k in new.keys() | before.keys() if new.get(k) != before.get(k))
    if not changed:
        return None
    if username in traders:
        if set(changed) <= set(trade.MARKS):
            return None
        refused = refuse_trade(obj, old, partners)
        return None if refused is None else f"{username}: {refused}"
    return (f"annotation(s) {', '.join(changed)} may only be changed by devshare ({', '.join(writers)}), "
            f"not by {username or 'an anonymous user'}: they record which devices the pod holds. Leave them as "
            "they are (delete and re-create the pod to have it placed again)")
