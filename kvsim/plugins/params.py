"""A policy class's parameters: what its ``__init__`` takes, by keyword, and their types.

This module owns :class:`Param` and :class:`ParamError`, reading a class's keyword
parameters and resolving their annotations (:func:`parameters`, :func:`hints`, refusing
one that cannot be resolved), how messages write a type (:func:`type_text`), and what a
scenario keeps of params (:func:`plain_params`). Checking a scenario's params against a
named policy is :func:`kvsim.plugins.resolve.check_params`.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any, NamedTuple

from kvsim.interrupts import interrupted, signals
from kvsim.plugins.failures import RegistrationError, at, describe

REQUIRED: Any = inspect.Parameter.empty  # a Param's default when it has none


class Param(NamedTuple):
    """One keyword parameter of a policy class's ``__init__``."""

    name: str
    annotation: Any  # its resolved annotation (Any: none, or one that cannot be resolved)
    default: Any  # REQUIRED: none

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def type_text(self) -> str:
        return type_text(self.annotation)


class ParamError(ValueError):
    """Params that do not fit a policy; ``param`` names the parameter at fault (None: the
    params as a whole)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def type_text(annotation: Any) -> str:
    """An annotation as messages and ``kvsim plugins`` write it (``float``, ``list[int]``)."""
    if annotation is Any:
        return "any"
    if typing.get_origin(annotation) is typing.Annotated:  # its type and its bounds
        base, *extras = typing.get_args(annotation)
        bounds = [
            f"{op} {getattr(m, attr)}"
            for extra in extras
            for m in getattr(extra, "metadata", [extra])
            for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
            if getattr(m, attr, None) is not None
        ]
        return type_text(base) + (f" ({', '.join(bounds)})" if bounds else "")
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def hints(cls: type, what: str = "", place: str = "") -> dict[str, Any]:
    """The resolved annotations of a policy class's ``__init__``
    (:func:`typing.get_type_hints`): what its params are checked against. One that cannot
    be resolved (``x: "NoSuchType"``, a name its module lacks) is a RegistrationError
    naming the parameter and the line of ``__init__``: never a parameter left unchecked.
    ``add`` calls it for every class registered (once a plugin's import is complete)."""
    init = cls.__init__  # type: ignore[misc]
    try:
        return typing.get_type_hints(init, include_extras=True)
    except Exception as whole:
        own = getattr(init, "__annotations__", None)
        bad, why = "", describe(whole)
        if isinstance(own, dict):  # which parameter: each resolved on its own
            for pname, ann in own.items():
                one = types.SimpleNamespace(
                    __annotations__={pname: ann}, __globals__=getattr(init, "__globals__", {})
                )
                try:
                    typing.get_type_hints(one, include_extras=True)
                except Exception as e:
                    bad, why = pname, describe(e)
                    break
        name = f"{what} ({cls.__name__})" if what else cls.__name__
        param = f"parameter {bad!r}" if bad and bad != "return" else "an annotation"
        code = getattr(init, "__code__", None)
        line = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else place
        raise RegistrationError(
            f"{name}: the annotation of its {param} cannot be resolved ({why}); kvsim checks "
            f"a scenario's params against them: import or define the type{at(line)}"
        ) from None


def parameters(cls: type) -> tuple[list[Param], bool]:
    """The parameters a policy class takes by keyword (from its ``__init__``'s signature,
    annotations resolved by :func:`hints`), and whether it takes any keyword
    (``**kwargs``). ParamError if its signature or an annotation cannot be read (plugin
    code may refuse; an annotation that does not resolve is refused when the class is
    registered)."""
    before = signals()
    try:
        sig = inspect.signature(cls)
        try:
            resolved = hints(cls)
        except RegistrationError as e:
            raise ParamError(str(e)) from None
    except ParamError:
        raise
    except BaseException as e:
        if interrupted(e, before):
            raise
        raise ParamError(f"cannot read the parameters of {cls.__name__} ({describe(e)})") from e
    out: list[Param] = []
    any_keyword = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            any_keyword = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            out.append(Param(p.name, resolved.get(p.name, Any), p.default))
    return out, any_keyword


def is_plain(value: Any) -> bool:
    """A value YAML and JSON write as they read it (what a scenario may keep)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if type(value) is list:
        return all(is_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def plain_params(checked: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """What a scenario keeps of params: each coerced value where YAML writes it as it
    reads it (``1`` given for a float is kept as ``1.0``), else the value as given (a
    list for a tuple), so that the scenario written back loads to the same one."""
    return {k: v if is_plain(v) else given[k] for k, v in checked.items()}
