"""The configuration file: every knob of the extender, ``devshare schedule`` and the webhook in one
versioned, validated YAML document.

```yaml
apiVersion: devshare.io/v1alpha1
kind: DevshareConfiguration
deviceTypes:
  gpu: true                   # gpu | rdma | fpga: true or false
  rdma: true
  fpga: true
  npu: {resources: [koordinator.sh/npu]}   # a new type: the resource names pods ask it with
dialects: {koordinator: true, nvidia: true, mgpu: true, aliyun: true}   # mgpu: seed 000's MGPUEnable
scheduling:
  nodePolicy: devshare        # devshare | binpack | spread
  cardPolicy: auto            # auto (the node policy's own) | binpack | spread: seed 000's card-level MGPUPolicy
  coreWeight: 50              # seed 000's MGPUWeightOfCore: percent, 20 means 0.2
  scheduleMode: index         # seed 000's MGPUScheduleMode: index | id
  nvidiaGpu: nvidia           # whose a bare nvidia.com/gpu pod is: nvidia | hami (HAMi's device plugin serves it)
  maxContainersPerCard: 16    # seed 000's MGPUMaxContainersPerCard
  topology: true
  dfsBudget: 2000
  assumeTTLSeconds: 60
  shortlist: 0                # filter passes only the best K nodes of a pod without soft wishes (0: all)
  steerOtherPods: false       # mark nodes with a wholly free GPU so that other schedulers' pods go elsewhere
policies:
  binpack: {cardWeight: 0.5}
  devshare: {kappa: 0.05, remainderWeight: 2.0, cpuPack: 0.5, priorWeight: 2.0, coverage: 1.0}
quotas:                       # per-namespace GPU quotas, summed over every dialect
  team-a: {gpuCore: 200, gpuMemory: 64Gi}
```

Decoded with msgspec into typed structs, strictly: an unknown field, a wrong type or a value out of
range is one :class:`InvalidInput` naming the file and the field. This module is the schema and its
loading only: the file is read at the edge (the command line), and :mod:`devshare.engine.build` is
the one way an engine is made from it; the refusal rules are :mod:`devshare.engine.refusals`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from devshare.model.errors import InvalidInput, yaml_error

API_VERSION = "devshare.io/v1alpha1"
KIND = "DevshareConfiguration"
DEVICE_TYPES = ("gpu", "rdma", "fpga")
# the dialects the switches of ``dialects`` name
DIALECTS = ("koordinator", "nvidia", "mgpu", "aliyun", "hami", "volcano-vgpu", "volcano-gpushare")

Percent = Annotated[int, msgspec.Meta(ge=0, le=100)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0.0)]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, rename="camel", omit_defaults=True):
    pass


class DeviceType(_Strict):
    """A device type given as a mapping: whether it is scheduled, and (for a type devshare has no
    dialect for) the resource names pods ask for it with, each a percent of one device."""

    enabled: bool = True
    resources: list[str] = msgspec.field(default_factory=list)


DeviceTypeValue = bool | DeviceType
TYPE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _default_types() -> dict[str, DeviceTypeValue]:
    return dict.fromkeys(DEVICE_TYPES, True)


class DeviceTypes:
    """The ``deviceTypes`` section read: which types are disabled, which are configured."""

    def __init__(self, section: dict[str, DeviceTypeValue]) -> None:
        self.section = section

    def disabled(self) -> frozenset[str]:
        """Types a pod may not ask for (seed 004's per-type enable switches)."""
        return frozenset(t for t, v in self.section.items()
                         if v is False or (isinstance(v, DeviceType) and not v.enabled))

    def configured(self) -> dict[str, tuple[str, ...]]:
        """Device type -> the resource names the file gives it (types devshare has no dialect for)."""
        return {t: tuple(v.resources) for t, v in self.section.items() if isinstance(v, DeviceType) and v.resources}


class Scheduling(_Strict):
    node_policy: Literal["devshare", "binpack", "spread"] = "devshare"
    card_policy: Literal["auto", "binpack", "spread"] = "auto"
    core_weight: Percent = 50
    schedule_mode: Literal["index", "id"] = "index"
    # whose a pod asking nvidia.com/gpu without HAMi's companion names is: NVIDIA's (whole cards,
    # Koordinator's annotation) or HAMi's (the same cards, HAMi's annotations: where HAMi's device
    # plugin still serves nvidia.com/gpu on the nodes, docs/migrate.md)
    nvidia_gpu: Literal["nvidia", "hami"] = "nvidia"
    max_containers_per_card: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    topology: bool = True
    dfs_budget: Positive = 2000
    assume_ttl_seconds: Annotated[float, msgspec.Meta(gt=0.0)] = msgspec.field(name="assumeTTLSeconds", default=60.0)
    # the extender's filter passes only the best K nodes (by devshare's score) of a pod without soft
    # wishes (server/extender/shortlist.py); 0: every node that fits
    shortlist: Annotated[int, msgspec.Meta(ge=0)] = 0
    # the extender's leader marks each node holding a whole GPU that nobody uses with a PreferNoSchedule
    # taint (devshare.io/whole-gpu-free), so that kube-scheduler's other profiles place the pods asking
    # no GPU on nodes whose GPUs are taken, leaving CPU beside the free GPUs (engine/steering.py,
    # docs/deploy.md "Pods that ask for no GPU"); off: the leader removes the taints it wrote
    steer_other_pods: bool = False


class BinpackSettings(_Strict):
    card_weight: Fraction | None = None  # node score = w x card score + (1 - w) x node score


class DevshareSettings(_Strict):
    kappa: NonNegative | None = None
    remainder_weight: NonNegative | None = None
    cpu_pack: Fraction | None = None
    prior_weight: NonNegative | None = None
    coverage: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None


class Policies(_Strict):
    binpack: BinpackSettings = msgspec.field(default_factory=BinpackSettings)
    devshare: DevshareSettings = msgspec.field(default_factory=DevshareSettings)


class NamespaceQuota(_Strict):
    """One namespace's GPU quota: compute in percent of one GPU (200 = two GPUs' worth) and memory
    (a quantity: 64Gi), each summed over every dialect its pods ask in; either may be left out."""

    gpu_core: Annotated[int, msgspec.Meta(ge=0)] | None = None
    gpu_memory: str | int | None = None

    def memory_bytes(self) -> int | None:
        from devshare.model.quantity import parse_quantity

        if self.gpu_memory is None:
            return None
        q = parse_quantity(self.gpu_memory)
        if q < 0 or q.denominator != 1:
            raise InvalidInput(f"must be a whole number of bytes >= 0, got {self.gpu_memory!r}")
        return int(q)


class Configuration(_Strict):
    api_version: str = msgspec.field(name="apiVersion", default=API_VERSION)
    kind: str = KIND
    device_types_section: dict[str, DeviceTypeValue] = msgspec.field(name="deviceTypes",
                                                                     default_factory=_default_types)
    dialects: dict[str, bool] = msgspec.field(default_factory=lambda: dict.fromkeys(DIALECTS, True))
    scheduling: Scheduling = msgspec.field(default_factory=Scheduling)
    policies: Policies = msgspec.field(default_factory=Policies)
    quotas: dict[str, NamespaceQuota] = msgspec.field(default_factory=dict)

    @property
    def device_types(self) -> DeviceTypes:
        return DeviceTypes(self.device_types_section)

    def effective_device_types(self) -> dict[str, DeviceTypeValue]:
        """Every device type with the value the extender runs with: a built-in type (gpu, rdma, fpga)
        the file leaves out is on, as in the defaults."""
        return {**_default_types(), **self.device_types_section}

    def effective_dialects(self) -> dict[str, bool]:
        """Every dialect's switch as the extender runs with it: one the file leaves out is on."""
        return {**dict.fromkeys(DIALECTS, True), **self.dialects}

    def disabled_dialects(self) -> frozenset[str]:
        """Dialects whose pods are refused (``dialects.mgpu: false`` is seed 000's ``MGPUEnable: false``)."""
        return frozenset(d for d, on in self.dialects.items() if not on)

    def card_binpack(self) -> bool:
        """The card level: binpack, unless the file says spread (or ``auto`` under node spread)."""
        s = self.scheduling
        return s.card_policy == "binpack" or (s.card_policy == "auto" and s.node_policy != "spread")

    def to_yaml(self) -> str:
        """The whole configuration, defaults included (msgspec's encoders leave defaults out), as YAML:
        what the extender runs with (every device type and dialect listed, on or off)."""
        out = _full(self)
        out["deviceTypes"] = {t: _full(v) if isinstance(v, DeviceType) else v
                              for t, v in self.effective_device_types().items()}
        out["dialects"] = self.effective_dialects()
        return yaml.safe_dump(out, sort_keys=False)


def _full(obj: msgspec.Struct) -> dict[str, Any]:
    """Every field of ``obj`` by its file name, nested structs included; unset policy settings left out."""
    out: dict[str, Any] = {}
    names = dict(zip(obj.__struct_fields__, obj.__struct_encode_fields__, strict=True))
    for field, encoded in names.items():
        value = getattr(obj, field)
        if isinstance(value, msgspec.Struct):
            out[encoded] = _full(value)
        elif isinstance(value, dict):
            out[encoded] = msgspec.to_builtins(value)
        elif value is not None:
            out[encoded] = value
    return out


def _where(path: str) -> str:
    """msgspec's ``$.scheduling.coreWeight`` / ``$[0]`` as ``scheduling.coreWeight``."""
    return path.removeprefix("$").removeprefix(".") or "(top level)"


def _problem(message: str) -> tuple[str, str]:
    """(field, what is wrong) from a msgspec validation message."""
    m = re.fullmatch(r"(.*) - at `([^`]*)`", message)
    text, at = (m.group(1), m.group(2)) if m else (message, "$")
    unknown = re.fullmatch(r"Object contains unknown field `([^`]*)`", text)
    if unknown:
        parent = _where(at)
        field = unknown.group(1) if parent == "(top level)" else f"{parent}.{unknown.group(1)}"
        return field, "unknown field (check its spelling; docs/configuration.md lists every field)"
    text = text.replace("`", "")
    text = re.sub(r"^Expected ", "expected ", text)
    text = text.replace("Invalid enum value", "unknown value")
    return _where(at), text


def _value_at(data: Any, field: str) -> Any:
    for key in field.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _choices(field: str) -> str:
    """How to fix a field, for messages."""
    choices = {
        "scheduling.nodePolicy": "use devshare, binpack or spread",
        "scheduling.cardPolicy": "use auto, binpack or spread",
        "scheduling.scheduleMode": "use index or id",
        "scheduling.nvidiaGpu": "use nvidia or hami",
        "scheduling.coreWeight": "an integer percent, 0 to 100: 20 means 0.2, as seed 000's MGPUWeightOfCore",
    }
    return f" ({choices[field]})" if field in choices else ""


def parse_config(data: Any, source: str = "configuration") -> Configuration:
    """A configuration from decoded YAML/JSON; anything wrong is one InvalidInput naming the field."""
    if not isinstance(data, dict):
        raise InvalidInput(f"expected a mapping with apiVersion: {API_VERSION} and kind: {KIND}", field=source)
    if data.get("apiVersion") != API_VERSION:
        raise InvalidInput(f"must be {API_VERSION}, got {data.get('apiVersion')!r}",
                           field=f"{source}: apiVersion")
    if data.get("kind") != KIND:
        raise InvalidInput(f"must be {KIND}, got {data.get('kind')!r}", field=f"{source}: kind")
    _check_device_types(data.get("deviceTypes"), source)
    _check_dialects(data.get("dialects"), source)
    _check_quotas(data.get("quotas"), source)
    try:
        cfg = msgspec.convert(data, Configuration, strict=True)
    except msgspec.ValidationError as e:
        field, what = _problem(str(e))
        value = _value_at(data, field)
        if what.startswith("expected") and "got" not in what and value is not None:
            what += f", got {value!r}"
        raise InvalidInput(what + _choices(field), field=f"{source}: {field}") from None
    for ns, quota in cfg.quotas.items():
        if not NAMESPACE.fullmatch(ns):
            raise InvalidInput("a namespace name is a DNS label (lowercase letters, digits, '-')",
                               field=f"{source}: quotas.{ns}")
        try:
            quota.memory_bytes()
        except InvalidInput as e:
            raise InvalidInput(f"{e.message} (a quantity such as 64Gi)",
                               field=f"{source}: quotas.{ns}.gpuMemory") from None
    return cfg


def _check_quotas(section: Any, source: str) -> None:
    """quotas, namespace by namespace (msgspec's messages cannot name the key of a mapping's value)."""
    if not isinstance(section, dict):
        return  # msgspec names the wrong type
    for ns, value in section.items():
        try:
            msgspec.convert(value, NamespaceQuota, strict=True)
        except msgspec.ValidationError as e:
            inner, what = _problem(str(e))
            where = f"quotas.{ns}" + (f".{inner}" if inner != "(top level)" else "")
            value_at = _value_at(value, inner) if isinstance(value, dict) else value
            if what.startswith("expected") and "got" not in what and value_at is not None:
                what += f", got {value_at!r}"
            raise InvalidInput(what, field=f"{source}: {where}") from None


def _check_dialects(section: Any, source: str) -> None:
    """dialects: the registry's names only (a typo must not leave a dialect silently on)."""
    from devshare.model import dialects
    from devshare.model.dialects.configured import PREFIX

    if not isinstance(section, dict):
        return  # msgspec names the wrong type
    known = [d for d in dialects.DIALECTS if not d.startswith(PREFIX)]
    for name in section:
        if name not in known:
            raise InvalidInput(f"unknown dialect: use one of {', '.join(known)} (a configured device type is "
                               "switched with deviceTypes.<type>.enabled)", field=f"{source}: dialects.{name}")


def _check_device_types(section: Any, source: str) -> None:
    """deviceTypes, type by type (msgspec's messages cannot name the key of a mapping's value)."""
    if section is None:
        return
    if not isinstance(section, dict):
        raise InvalidInput(f"expected object, got {type(section).__name__}: give each device type true, false or "
                           "{resources: [...]}", field=f"{source}: deviceTypes")
    from devshare.model import dialects
    from devshare.model.dialects.configured import PREFIX

    seen: dict[str, str] = {}
    for t, value in section.items():
        where = f"{source}: deviceTypes.{t}"
        if not isinstance(t, str) or not TYPE_NAME.fullmatch(t):
            raise InvalidInput("a device type is a lowercase name (letters, digits, '-'), as the Device objects' "
                               "type", field=where)
        try:
            v = msgspec.convert(value, DeviceTypeValue, strict=True)
        except msgspec.ValidationError as e:
            inner, what = _problem(str(e))
            if inner != "(top level)":
                where = f"{where}.{inner.removeprefix('[...].')}"
            if what.startswith("expected"):
                what += ": give true, false or {enabled: true, resources: [...]}"
            raise InvalidInput(what, field=where) from None
        if not isinstance(v, DeviceType):
            if t not in DEVICE_TYPES:
                raise InvalidInput(f"devshare has no dialect for {t} devices: give the resource names pods ask for "
                                   f"them with, e.g. {t}: {{resources: [koordinator.sh/{t}]}} (docs/configuration.md)",
                                   field=where)
            continue
        if t in DEVICE_TYPES and v.resources:
            raise InvalidInput(f"{t}'s resource names are its dialects' (README, Request dialects): resources is "
                               f"for device types devshare has no dialect for; give {t}: true or false", field=where)
        if t not in DEVICE_TYPES and not v.resources:
            raise InvalidInput(f"devshare has no dialect for {t} devices: list the resource names pods ask for them "
                               f"with in resources, e.g. [koordinator.sh/{t}]", field=where)
        for name in v.resources:
            if not RESOURCE_NAME.fullmatch(name) or name.startswith(("kubernetes.io/", "requests.", "limits.")):
                raise InvalidInput(f"{name!r} is not an extended resource name kube-scheduler can route to devshare: "
                                   f"give domain/name outside kubernetes.io, e.g. koordinator.sh/{t}",
                                   field=f"{where}.resources")
            owner = dialects.owner_of(name)
            if owner is not None and not owner.name.startswith(PREFIX):
                raise InvalidInput(f"{name} is already read by the {owner.name} dialect", field=f"{where}.resources")
            if name in seen:
                raise InvalidInput(f"{name} is listed for {seen[name]} too: a resource name asks for one device "
                                   "type", field=f"{where}.resources")
            seen[name] = t


def load_config(path: Path | str | None) -> Configuration:
    """The configuration file at ``path`` (defaults everywhere when None)."""
    if path is None:
        return Configuration()
    p = Path(path)
    text = p.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise yaml_error(e, p) from None
    if data is None:
        raise InvalidInput(f"the file is empty: give at least apiVersion: {API_VERSION} and kind: {KIND}",
                           field=str(p))
    return parse_config(data, str(p))


def with_overrides(cfg: Configuration, *, policy: str | None = None, core_weight: float | None = None,
                   assume_ttl: float | None = None) -> Configuration:
    """The configuration with the command line's flags applied over the file's values (the flags win).
    ``--policy spread`` keeps its meaning from before the file existed: spread cards and nodes."""
    s = cfg.scheduling
    if policy is not None:
        if policy not in ("devshare", "binpack", "spread"):
            raise InvalidInput(f"unknown policy {policy!r}: use one of devshare, binpack, spread", field="--policy")
        card = "spread" if policy == "spread" else ("binpack" if policy == "binpack" else s.card_policy)
        s = msgspec.structs.replace(s, node_policy=policy, card_policy=card)
    if core_weight is not None:
        if not 0.0 <= core_weight <= 1.0:
            raise InvalidInput(f"must be between 0 and 1, got {core_weight}", field="--core-weight")
        s = msgspec.structs.replace(s, core_weight=round(core_weight * 100))
    if assume_ttl is not None:
        if assume_ttl <= 0:
            raise InvalidInput(f"must be > 0, got {assume_ttl}", field="--assume-ttl")
        s = msgspec.structs.replace(s, assume_ttl_seconds=assume_ttl)
    return msgspec.structs.replace(cfg, scheduling=s)
