"""CEL device selectors, as Kubernetes evaluates them for DRA, on Google's CEL runtime
(``cel-expr-python``: the CEL team's C++ implementation, cel-cpp, wrapped for Python).

The expression sees one variable, ``device``, shaped as Kubernetes' ``kubernetes.DRADevice``:
``driver``, ``attributes`` (domain -> id -> value), ``capacity`` (domain -> id -> quantity) and
``allowMultipleAllocations``. As in Kubernetes, looking up a domain the device has nothing in gives
an empty map (``device.attributes["other.example.com"]`` is ``{}``, not an error); here for every
domain the expression names as a string literal, which is how selectors name them.

Kubernetes' own CEL libraries are Go code that no Python CEL runtime ships. The two that device
selectors use are provided here as CEL functions over opaque message types (cel-cpp calls Python for
them): **quantities** (``quantity()``, ``isQuantity()``, ``compareTo``, ``isLessThan``,
``isGreaterThan``, ``add``, ``sub``, ``sign``, ``isInteger``, ``asInteger``, ``asApproximateFloat``)
and **semantic versions** (``semver()``, ``isSemver()``, ``major``, ``minor``, ``patch``,
``compareTo``, ``isLessThan``, ``isGreaterThan``); cel-expr-python brings the strings extension and
``cel.bind``. Not provided: ``url``/``isURL``, ``ip``/``cidr``, ``format.*``, the ``lists``
library (``sum``, ``min``, ``max``, ``indexOf``, ``isSorted``), ``find``/``findAll``, ``sets.*``.
An expression that uses one fails to compile with :class:`CelError` naming it
(:data:`UNSUPPORTED`): the claim is refused with that message, never allocated unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_strings  # type: ignore[import-untyped]
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

from devshare.engine.caches import LRU
from devshare.model.draslices import SliceDevice, Version
from devshare.model.errors import InvalidQuantity
from devshare.model.quantity import parse_quantity

MAX_EXPRESSION = 10 * 1024  # resource.k8s.io/v1 CELSelectorExpressionMaxLength
COMPILED_KEPT = 1024
# Kubernetes CEL functions devshare's evaluator does not have, and the library each comes from
UNSUPPORTED = {
    "url": "URLs", "isURL": "URLs", "getScheme": "URLs", "getHost": "URLs", "getHostname": "URLs",
    "getPort": "URLs", "getEscapedPath": "URLs", "getQuery": "URLs",
    "ip": "IP", "isIP": "IP", "cidr": "CIDR", "isCIDR": "CIDR", "containsIP": "CIDR", "containsCIDR": "CIDR",
    "family": "IP", "isLoopback": "IP", "isUnspecified": "IP",
    "format": "format", "validate": "format",
    "sum": "lists", "min": "lists", "max": "lists", "indexOf": "lists", "lastIndexOf": "lists",
    "isSorted": "lists", "includes": "lists", "find": "regex", "findAll": "regex", "sets": "sets",
    "distinct": "ext.lists", "flatten": "ext.lists", "slice": "ext.lists", "sort": "ext.lists",
    "sortBy": "ext.lists", "range": "ext.lists",
}


class CelError(Exception):
    """An expression that cannot be used (does not compile, uses an unsupported function, is too
    long); ``str()`` is a message for the claim's owner."""


# ------------------------------------------------------------------ opaque types
def _message_type() -> tuple[descriptor_pool.DescriptorPool, Any]:
    """One message type for both of Kubernetes' opaque CEL types: cel-cpp's runtime keeps one overload
    per function and argument kinds, so quantities and versions share a type and each function checks
    which it got (``kind``)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="devshare_dra_cel.proto", package="kubernetes", syntax="proto3")
    m = fdp.message_type.add(name="Opaque")
    string, int64 = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    for i, (n, t) in enumerate((("kind", string), ("exact", string), ("major", int64), ("minor", int64),
                                ("patch", int64), ("pre", string))):
        m.field.add(name=n, number=i + 1, type=t, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool, message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Opaque"))


_POOL, Opaque = _message_type()
_Q = _S = cel.Type("kubernetes.Opaque")
QUANTITY, SEMVER = "quantity", "semver"


def quantity_value(amount: Fraction) -> Any:
    return Opaque(kind=QUANTITY, exact=str(amount))


def _fraction(q: Any) -> Fraction:
    if q.kind != QUANTITY:
        raise ValueError(f"expected a quantity, got {_kind(q)}")
    return Fraction(q.exact)


def _version(v: Any) -> Any:
    if v.kind != SEMVER:
        raise ValueError(f"expected a semver, got {_kind(v)}")
    return v


def _quantity(text: str) -> Any:
    try:
        return quantity_value(parse_quantity(text))
    except InvalidQuantity as e:
        raise ValueError(f"quantity({text!r}): {e.message}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except InvalidQuantity:
        return False
    return True


def _cmp(a: Fraction | tuple[Any, ...], b: Fraction | tuple[Any, ...]) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver_value(text: str, *, normalize: bool = False) -> Any:
    """A semantic version (semver.org 2.0.0); ``normalize`` accepts ``v1.2``, ``01.2.3`` as Kubernetes'
    ``semver(s, true)`` does."""
    s = text.strip()
    if normalize:
        n = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", s)
        if n:
            s = f"{int(n.group(1))}.{int(n.group(2) or 0)}.{int(n.group(3) or 0)}{n.group(4)}"
    m = _SEMVER.match(s)
    if not m:
        raise ValueError(f"semver({text!r}): not a semantic version (MAJOR.MINOR.PATCH, e.g. 535.104.5)")
    return Opaque(kind=SEMVER, major=int(m.group(1)), minor=int(m.group(2)), patch=int(m.group(3)),
                  pre=m.group(4) or "")


def _pre_key(pre: str) -> tuple[Any, ...]:
    """semver.org precedence: a version without pre-release ranks above one with it; identifiers
    compare numerically when numeric, else lexically, numeric below alphanumeric."""
    if not pre:
        return (1,)
    return (0, *((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")), (-1, 0, ""))


def _semver_key(v: Any) -> tuple[Any, ...]:
    v = _version(v)
    return (v.major, v.minor, v.patch, _pre_key(v.pre))


def _is_semver(text: str) -> bool:
    return bool(_SEMVER.match(text.strip()))


def _fn(name: str, overloads: list[tuple[str, Any, list[Any], bool, Any]]) -> Any:
    return cel.FunctionDecl(name, [cel.Overload(oid, return_type=ret, parameters=params, is_member=member, impl=impl)
                                   for oid, ret, params, member, impl in overloads])


def _kubernetes_functions() -> list[Any]:
    T = cel.Type
    f = Fraction
    return [
        _fn("quantity", [("quantity_string", _Q, [T.STRING], False, _quantity)]),
        _fn("isQuantity", [("isQuantity_string", T.BOOL, [T.STRING], False, _is_quantity)]),
        _fn("compareTo", [("k8s_compareTo", T.INT, [_Q, _Q], True, lambda a, b: _cmp(*_keys(a, b)))]),
        _fn("isLessThan", [("k8s_isLessThan", T.BOOL, [_Q, _Q], True, lambda a, b: _cmp(*_keys(a, b)) < 0)]),
        _fn("isGreaterThan", [("k8s_isGreaterThan", T.BOOL, [_Q, _Q], True,
                               lambda a, b: _cmp(*_keys(a, b)) > 0)]),
        _fn("add", [("quantity_add", _Q, [_Q, _Q], True, lambda a, b: quantity_value(_fraction(a) + _fraction(b))),
                    ("quantity_add_int", _Q, [_Q, T.INT], True, lambda a, b: quantity_value(_fraction(a) + b))]),
        _fn("sub", [("quantity_sub", _Q, [_Q, _Q], True, lambda a, b: quantity_value(_fraction(a) - _fraction(b))),
                    ("quantity_sub_int", _Q, [_Q, T.INT], True, lambda a, b: quantity_value(_fraction(a) - b))]),
        _fn("sign", [("quantity_sign", T.INT, [_Q], True, lambda a: _cmp(_fraction(a), f(0)))]),
        _fn("isInteger", [("quantity_isInteger", T.BOOL, [_Q], True,
                           lambda a: _fraction(a).denominator == 1 and abs(_fraction(a)) < 2**63)]),
        _fn("asInteger", [("quantity_asInteger", T.INT, [_Q], True, _as_integer)]),
        _fn("asApproximateFloat", [("quantity_asApproximateFloat", T.DOUBLE, [_Q], True,
                                    lambda a: float(_fraction(a)))]),
        _fn("semver", [("semver_string", _S, [T.STRING], False, semver_value),
                       ("semver_string_bool", _S, [T.STRING, T.BOOL], False,
                        lambda s, n: semver_value(s, normalize=n))]),
        _fn("isSemver", [("isSemver_string", T.BOOL, [T.STRING], False, _is_semver),
                         ("isSemver_string_bool", T.BOOL, [T.STRING, T.BOOL], False,
                          lambda s, n: _is_semver(s) or (n and _normalizes(s)))]),
        _fn("major", [("semver_major", T.INT, [_S], True, lambda v: _version(v).major)]),
        _fn("minor", [("semver_minor", T.INT, [_S], True, lambda v: _version(v).minor)]),
        _fn("patch", [("semver_patch", T.INT, [_S], True, lambda v: _version(v).patch)]),
    ]


def _keys(a: Any, b: Any) -> tuple[Any, Any]:
    """Comparable keys of two quantities or two versions."""
    if a.kind == b.kind == QUANTITY:
        return _fraction(a), _fraction(b)
    if a.kind == b.kind == SEMVER:
        return _semver_key(a), _semver_key(b)
    raise ValueError(f"cannot compare {_kind(a)} with {_kind(b)}: both must be quantities or both versions")


def _kind(v: Any) -> str:
    return f"a {v.kind}" if v.kind else "a value"


def _as_integer(a: Any) -> int:
    v = _fraction(a)
    if v.denominator != 1 or abs(v) >= 2**63:
        raise ValueError(f"asInteger: {v} is not an integer that fits in 64 bits")
    return int(v)


def _normalizes(s: str) -> bool:
    try:
        semver_value(s, normalize=True)
    except ValueError:
        return False
    return True


_ENV: Any = None


def _env() -> Any:
    global _ENV
    if _ENV is None:
        _ENV = cel.NewEnv(_POOL, variables={"device": cel.Type.DYN},
                          extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()],
                          functions=_kubernetes_functions())
    return _ENV


# ------------------------------------------------------------------ compiled selectors
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')


class Selector:
    """One compiled CEL selector."""

    def __init__(self, expression: str) -> None:
        if len(expression) > MAX_EXPRESSION:
            raise CelError(f"the CEL expression is {len(expression)} characters long; at most {MAX_EXPRESSION}")
        self.expression = expression
        try:
            self._program = _env().compile(expression)
        except Exception as e:  # cel-cpp's compile errors arrive as RuntimeError with the checker's text
            raise CelError(_compile_message(expression, str(e))) from None
        rt = self._program.return_type()
        if rt != cel.Type.BOOL and rt != cel.Type.DYN:
            raise CelError(f"the CEL expression {expression!r} must evaluate to a bool, not {rt.name()}")
        # the domains the expression names: they read as empty maps on devices that have none there
        self.domains = {a or b for a, b in _LITERAL.findall(expression)}

    def matches(self, device: SliceDevice) -> tuple[bool, str]:
        """(whether ``device`` matches, the runtime error when the expression failed on it). A device
        on which the expression fails does not match."""
        try:
            value = self._program.eval(data={"device": device_view(device, self.domains)})
        except Exception as e:
            return False, f"{e}"
        if value is None:
            return False, f"CEL expression {self.expression!r} gave no value"
        v = value.value()
        if isinstance(v, bool):
            return v, ""
        if value.type() == cel.Type.ERROR:
            return False, f"CEL expression {self.expression!r} failed: {v}"
        return False, f"CEL expression {self.expression!r} gave {value.type().name()}, not a bool"


def _compile_message(expression: str, text: str) -> str:
    m = re.search(r"undeclared reference to '([A-Za-z_][A-Za-z0-9_.]*)'", text) or re.search(
        r"found no matching overload for '([A-Za-z_][A-Za-z0-9_.]*)'", text)
    if m:
        fn = m.group(1).split(".")[0] if m.group(1).startswith(("sets.", "format.")) else m.group(1)
        lib = UNSUPPORTED.get(fn)
        if lib is not None:
            return (f"the CEL expression {expression!r} uses {m.group(1)}() from Kubernetes' {lib} CEL library, "
                    f"which devshare's CEL evaluator does not provide; write the selector without it "
                    f"(supported: the standard CEL functions, strings, cel.bind, quantities and semver)")
    first = text.split("\n")[0].removeprefix("INVALID_ARGUMENT: ")
    return f"the CEL expression {expression!r} does not compile: {first}"


_COMPILED: LRU[str, Selector | CelError] = LRU(COMPILED_KEPT)


def compile_selector(expression: str) -> Selector:
    """The compiled selector (kept, most recently used first); raises :class:`CelError`."""
    got: Selector | CelError | None = _COMPILED.get(expression)
    if got is None:
        try:
            got = Selector(expression)
        except CelError as e:
            got = e
        _COMPILED.put(expression, got)
    if isinstance(got, CelError):
        raise got
    return got


def device_view(device: SliceDevice, domains: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """``device`` as the CEL variable ``device`` (Kubernetes' ``kubernetes.DRADevice``)."""
    attributes: dict[str, dict[str, Any]] = {d: {} for d in domains}
    for domain, values in device.attributes.items():
        attributes[domain] = {k: semver_value(v, normalize=True) if isinstance(v, Version) else v
                              for k, v in values.items()}
    capacity: dict[str, dict[str, Any]] = {d: {} for d in domains}
    for domain, caps in device.capacity.items():
        capacity[domain] = {k: quantity_value(v) for k, v in caps.items()}
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity,
            "allowMultipleAllocations": device.multiple}


def all_match(selectors: Mapping[str, Selector] | list[Selector], device: SliceDevice) -> tuple[bool, str]:
    """Whether ``device`` matches every selector (and the first runtime error met)."""
    for s in (selectors.values() if isinstance(selectors, Mapping) else selectors):
        ok, err = s.matches(device)
        if not ok:
            return False, err
    return True, ""
