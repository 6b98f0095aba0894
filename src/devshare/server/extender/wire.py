"""The wire types of kube-scheduler's extender protocol (``k8s.io/kube-scheduler/extender/v1``).

The Go structs carry no json tags, so encoding/json writes the field names as they are
(PascalCase: ``Pod``, ``NodeNames``, ``FailedAndUnresolvableNodes``, ``PodUID``...) and reads keys
case-insensitively. We write PascalCase and accept any case of a field name (``nodeNames``,
``podUid``, ``NODENAMES``) at every level of these types. ``Pod`` and ``Nodes`` are Kubernetes
objects (camelCase JSON) and are kept as plain dicts for the model's parsers.

A body that is not one of these gets :class:`BadRequest` (HTTP 400 with its message).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from devshare.model.kubeobjects import label_problem, subdomain_problem

Obj = dict[str, Any]


class BadRequest(Exception):
    """The body is not the extender type the verb takes. ``str(err)`` says what is wrong."""


TOO_DEEP = ("JSON nested too deeply (hundreds of levels): no Kubernetes object or extender argument nests "
            "like that")


def too_deep(what: str) -> BadRequest:
    """The answer to a body whose nesting exhausted the decoder's recursion limit."""
    return BadRequest(f"{what}: {TOO_DEEP}")


_ACRONYMS = {"pod_uid": "PodUID", "uid": "UID", "num_pdb_violations": "NumPDBViolations"}


def _pascal(name: str) -> str:
    """Go's field name for a snake_case attribute (``node_names`` -> ``NodeNames``)."""
    return _ACRONYMS.get(name) or "".join(part.capitalize() for part in name.split("_"))


class _Wire(msgspec.Struct, rename=_pascal):
    pass


# --------------------------------------------------------------------- requests
NULL = b"null"


def _null() -> msgspec.Raw:
    return msgspec.Raw(NULL)


class ExtenderArgs(_Wire, kw_only=True):
    """Body of filter and prioritize. ``NodeNames`` with ``nodeCacheCapable: true`` (``Nodes`` is then
    null), a full v1 NodeList in ``Nodes`` otherwise.

    The fields are kept as raw JSON and decoded when used (:func:`decode_pod`, :func:`decode_names`,
    :func:`decode_nodes`): the same Pod and the same NodeNames list arrive again and again, so their
    bytes key caches and most calls decode neither."""

    pod: msgspec.Raw
    nodes: msgspec.Raw = msgspec.field(default_factory=_null)
    node_names: msgspec.Raw = msgspec.field(default_factory=_null)

    @classmethod
    def of(cls, pod: Obj, *, node_names: list[str] | None = None, nodes: Obj | None = None) -> ExtenderArgs:
        """Arguments from Python values (tests, benchmarks)."""
        enc = msgspec.json.encode
        return cls(pod=msgspec.Raw(enc(pod)), nodes=msgspec.Raw(enc(nodes)), node_names=msgspec.Raw(enc(node_names)))


def is_null(raw: msgspec.Raw) -> bool:
    return bytes(raw).strip() == NULL


def _field_error(e: msgspec.ValidationError, field: str) -> BadRequest:
    msg = str(e)
    msg = msg.replace("`$", f"`$.{field}", 1) if " - at `$" in msg else f"{msg} - at `$.{field}`"
    return BadRequest(f"not a valid ExtenderArgs: {msg}")


def decode_pod(raw: bytes) -> Obj:
    """The ``Pod`` of an ExtenderArgs (a v1 Pod object)."""
    try:
        return msgspec.json.decode(raw, type=Obj)
    except msgspec.ValidationError as e:
        raise _field_error(e, "Pod") from None
    except RecursionError:
        raise too_deep("Pod") from None


def decode_names(raw: bytes) -> list[str]:
    """The ``NodeNames`` of an ExtenderArgs (not null)."""
    try:
        return msgspec.json.decode(raw, type=list[str])
    except msgspec.ValidationError as e:
        raise _field_error(e, "NodeNames") from None
    except RecursionError:
        raise too_deep("NodeNames") from None


def decode_nodes(raw: bytes) -> Obj:
    """The ``Nodes`` of an ExtenderArgs (a v1 NodeList, not null)."""
    try:
        return msgspec.json.decode(raw, type=Obj)
    except msgspec.ValidationError as e:
        raise _field_error(e, "Nodes") from None
    except RecursionError:
        raise too_deep("Nodes") from None


class ExtenderBindingArgs(_Wire, kw_only=True):
    pod_name: str
    pod_namespace: str
    node: str
    pod_uid: str = ""

    def __post_init__(self) -> None:
        # the names go into the API requests of the bind (the pod's GET, its Binding): a name that is not
        # a Kubernetes name is refused here, before anything is read or written (issue 37)
        for what, value, problem in (("PodNamespace", self.pod_namespace, label_problem(self.pod_namespace)),
                                     ("PodName", self.pod_name, subdomain_problem(self.pod_name)),
                                     ("Node", self.node, subdomain_problem(self.node))):
            if problem is not None:
                shown = repr(value) if len(value) <= 80 else f"{value[:60]!r}...({len(value)} characters)"
                raise ValueError(f"{what} {shown} is not a Kubernetes name: {problem}")


class MetaPod(_Wire, kw_only=True):
    uid: str


class MetaVictims(_Wire, kw_only=True):
    pods: list[MetaPod] = msgspec.field(default_factory=list)
    num_pdb_violations: int = 0


class Victims(_Wire, kw_only=True):
    pods: list[Obj] = msgspec.field(default_factory=list)
    num_pdb_violations: int = 0


class ExtenderPreemptionArgs(_Wire, kw_only=True):
    pod: Obj
    node_name_to_victims: dict[str, Victims] | None = None
    node_name_to_meta_victims: dict[str, MetaVictims] | None = None


# --------------------------------------------------------------------- answers
class ExtenderFilterResult(_Wire, kw_only=True):
    nodes: Obj | None = None
    node_names: list[str] | msgspec.Raw | None = None  # Raw: the JSON array made already (never decoded)
    failed_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    failed_and_unresolvable_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    error: str = ""


class HostPriority(_Wire, kw_only=True):
    host: str
    score: int


class ExtenderBindingResult(_Wire, kw_only=True):
    error: str = ""


class ExtenderPreemptionResult(_Wire, kw_only=True):
    node_name_to_meta_victims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


# --------------------------------------------------------------------- decoding
T = TypeVar("T", bound=_Wire)

# wire name (lower case) -> wire name, per struct; the nested struct types to descend into
_NESTED: dict[type[Any], dict[str, tuple[str, type[Any]]]] = {
    ExtenderPreemptionArgs: {"NodeNameToVictims": ("map", Victims), "NodeNameToMetaVictims": ("map", MetaVictims)},
    MetaVictims: {"Pods": ("list", MetaPod)},
}


def _wire_names(cls: type[Any]) -> dict[str, str]:
    info = msgspec.structs.fields(cls)
    return {f.encode_name.lower(): f.encode_name for f in info}


_NAMES: dict[type[Any], dict[str, str]] = {}


def _canonical(value: Any, cls: type[Any], where: str) -> Any:
    """Rename the keys of ``value`` (a JSON object meant as a ``cls``) to their wire spelling."""
    if not isinstance(value, dict):
        return value  # msgspec.convert reports the wrong type
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = _wire_names(cls)
    out: dict[str, Any] = {}
    for k, v in value.items():
        name = names.get(k.lower(), k) if isinstance(k, str) else k
        if name in out:
            raise BadRequest(f"{where}: field {name} is given twice (keys differing only in case)")
        out[name] = v
    for name, (shape, sub) in _NESTED.get(cls, {}).items():
        v = out.get(name)
        if shape == "map" and isinstance(v, dict):
            out[name] = {n: _canonical(x, sub, f"{where}.{name}[{n}]") for n, x in v.items()}
        elif shape == "list" and isinstance(v, list):
            out[name] = [_canonical(x, sub, f"{where}.{name}[{i}]") for i, x in enumerate(v)]
    return out


def decode(body: bytes, cls: type[T]) -> T:
    """Decode a request body into ``cls``; any case of the field names is accepted."""
    try:
        return _decode(body, cls)
    except RecursionError:  # msgspec and _canonical both recurse with the nesting of the body
        raise too_deep(f"not a valid {cls.__name__}") from None


def _decode(body: bytes, cls: type[T]) -> T:
    what = cls.__name__
    if not body.strip():
        raise BadRequest(f"empty body: expected a JSON object of type {what}")
    try:
        out = msgspec.json.decode(body, type=cls)  # the usual case: PascalCase keys
        if not (isinstance(out, ExtenderArgs) and is_null(out.node_names) and is_null(out.nodes)):
            return out
        # no candidates under the usual names: maybe under another spelling (nodeNames)
    except msgspec.ValidationError:
        pass  # maybe another spelling of the keys; the slow path says what is wrong
    except msgspec.DecodeError as e:
        raise BadRequest(f"body is not valid JSON ({e}): expected a JSON object of type {what}") from None
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as e:  # the typed decode can stop at a wrong type before the bad JSON
        raise BadRequest(f"body is not valid JSON ({e}): expected a JSON object of type {what}") from None
    if not isinstance(raw, dict):
        raise BadRequest(f"body must be a JSON object of type {what}, got a JSON {_json_kind(raw)}")
    try:
        canonical = _canonical(raw, cls, what)
        if cls is ExtenderArgs:  # raw JSON fields: decode the renamed object again
            return msgspec.json.decode(msgspec.json.encode(canonical), type=cls)
        return msgspec.convert(canonical, cls)
    except msgspec.ValidationError as e:
        raise BadRequest(f"not a valid {what}: {e}") from None


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null")


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)
