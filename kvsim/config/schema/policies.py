"""Policy fields: :class:`PolicyRef` (a built-in or plugin policy by name, with its
parameters), the annotated field types per policy kind, their defaults and the field paths
that name policies (:data:`POLICY_FIELDS`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvsim.config.schema.fields import Record
from kvsim.errors import shown
from kvsim.plugins.params import ParamError, plain_params
from kvsim.plugins.registry import LABELS
from kvsim.plugins.resolve import check_name, check_params


class PolicyRef(Record):
    """A policy a scenario names: a built-in one or a plugin's, with the keyword
    parameters its class is made with. YAML gives ``NAME`` or ``{name: NAME, params:
    {...}}``; the params are checked against the class's ``__init__`` (kvsim.plugins)."""

    name: str = Field(description="the policy's name: a built-in one or a plugin's")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments of the plugin class's __init__ (the built-in "
        "policies take none)",
    )

    def __str__(self) -> str:
        """``name``, or ``name(k=v, ...)`` with its params (for reports and messages)."""
        return policy_text({"name": self.name, "params": self.params}) or self.name


def policy_text(value: Any) -> str | None:
    """A swept policy given with its params (``{name, params}``, kept in a sweep's tables
    as JSON text) as a scenario's summary names it: ``s3fifo(small_frac=0.1)``; None for
    any other value."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
        return None
    params = value.get("params") or {}
    if not isinstance(params, dict) or set(value) - {"name", "params"}:
        return None
    inner = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{value['name']}({inner})" if inner else value["name"]


def policy_named(name: str) -> PolicyRef:
    """A policy field's default: the built-in policy ``name``, no params."""
    return PolicyRef(name=name)


# the name a policy field of each kind takes by default (when the field is not given)
POLICY_DEFAULTS: dict[str, str] = {
    "eviction": "lru",
    "admission": "all",
    "router": "round_robin",
    "scheduler": "fcfs",
    "load_policy": "sync",
    "prefetch": "none",
}


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an eviction policy", "a router"."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _promote(kind: str) -> Callable[[Any], Any]:
    """A policy field's YAML as a PolicyRef's: ``NAME`` is ``{name: NAME}``. A mapping
    must name its policy: params without a name (``{params: {...}}``, or an override of one
    parameter where no layer names the policy) are for no policy in particular, and are
    refused rather than given to the kind's default."""

    def promote(value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict):
            if value.get("name") is None:
                keys = ", ".join(sorted(str(k) for k in value if k != "name"))
                given = f"a mapping of {keys}" if keys else "an empty mapping"
                given += " with name null" if "name" in value else " without a name"
                raise ValueError(
                    f"given {given}; {_a(LABELS[kind])} mapping names the "
                    "policy its params are for: {name: NAME, params: {...}} (a field left "
                    f"out is {POLICY_DEFAULTS[kind]!r})"
                )
            return value
        if isinstance(value, PolicyRef):
            return value
        raise ValueError(
            f"expected {_a(LABELS[kind])}'s name or a mapping "
            f"{{name: NAME, params: {{...}}}}, got {shown(value)}"
        )

    return promote


def _checked(kind: str) -> Callable[[PolicyRef], PolicyRef]:
    """The check of a policy field: the name must be a built-in one or one a loaded plugin
    registered (the scenario's ``plugins`` are imported before it is validated); the
    params must fit its class, coerced to its annotations (an error names the parameter:
    ``tiers.host.eviction.params.small_frac``)."""

    def check(ref: PolicyRef) -> PolicyRef:
        check_name(kind, ref.name)
        try:
            checked = check_params(kind, ref.name, ref.params)
        except ParamError as e:
            detail = InitErrorDetails(
                type=PydanticCustomError("value_error", "{reason}", {"reason": str(e)}),
                loc=("params", e.param) if e.param is not None else ("params",),
                input=ref.params.get(e.param) if e.param is not None else ref.params,
            )
            raise ValidationError.from_exception_data("PolicyRef", [detail]) from None
        if not ref.params:
            return ref
        return ref.model_copy(update={"params": plain_params(checked, ref.params)})

    return check


def _policy(kind: str) -> Any:
    """A policy field of ``kind``: NAME or {name: NAME, params: {...}}, held as a PolicyRef."""
    return Annotated[PolicyRef, BeforeValidator(_promote(kind)), AfterValidator(_checked(kind))]


EvictionName = _policy("eviction")
AdmissionName = _policy("admission")
RouterName = _policy("router")
SchedulerName = _policy("scheduler")
LoadPolicyName = _policy("load_policy")
PrefetchName = _policy("prefetch")

# every policy field of a scenario, by path, and its kind
POLICY_FIELDS: dict[tuple[str, ...], str] = {
    **{("tiers", t, k): k for t in ("gpu", "host", "nvme") for k in ("eviction", "admission")},
    ("remote", "eviction"): "eviction",
    ("remote", "admission"): "admission",
    ("cluster", "router"): "router",
    ("cluster", "load_policy"): "load_policy",
    ("engine", "scheduler"): "scheduler",
    ("prefetch", "policy"): "prefetch",
}


WritePolicy = Literal["write_back", "write_through", "write_through_selective"]
