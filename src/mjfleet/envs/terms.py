"""Recipes as data: reward terms chosen by name from a library, each with its weight and parameters.

A recipe is a mapping `name -> Term(func, weight, params)`: `func` names a function of the term library (registered
with `@reward_term`), `weight` scales it (0 disables it) and `params` are its keyword arguments. A task's config
holds its recipe (tyro turns it into flags: `--env.rewards.<name>.weight 2.0`,
`--env.rewards.<name>.params.std 0.5`), so a recipe can be read, diffed and overridden like any other setting.

A term is either a plain function `fn(env, **params) -> (num_envs,) tensor`, or a class whose constructor takes
`(env, **params)` once (to resolve names into index tensors, allocate state) and whose instances are called
`term(env) -> (num_envs,) tensor` at every step (with `reset(env, mask)` where it keeps state over an episode, and a
static `check(model, joint_names, **params)` that resolves its names on a compiled model before any worker starts). Both
are bound once, when the environment is built: the step itself calls a list of callables, with no lookups and no
per-term Python branches on tensor values, so it still records as one CUDA graph.

A user's own term is one function and one line of a recipe:

    @reward_term
    def feet_apart(env, min_distance: float = 0.2) -> torch.Tensor: ...

    cfg.rewards["feet_apart"] = Term("feet_apart", weight=0.5)
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from mjfleet.errors import UsageError


@dataclasses.dataclass
class Term:
    """One entry of a recipe: the library function `func`, its `weight` and its keyword parameters."""

    func: str
    """The name the term is registered under (`@reward_term`)."""
    weight: float = 1.0
    """Scale of the term (per second for the locomotion tasks, scaled by the policy step); 0 switches it off."""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the term (its function's or class constructor's), over the defaults it declares."""


class ParamError(ValueError):
    """A term's parameter does not fit the robot or is out of range; the binder names the recipe field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


REWARD_TERMS: dict[str, Callable[..., Any]] = {}
"""The reward term library: name -> function or class (see the module docstring)."""


def reward_term(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    positive: tuple[str, ...] = (),
    requires: tuple[str, ...] = (),
):
    """Register `fn` in the reward term library under `name` (default: its own name); usable as `@reward_term` or
    `@reward_term(name="...", positive=("std",))`. `positive` names parameters that must be positive numbers
    (kernel widths), checked with the recipe; `requires` names attributes the environment must have (state only
    some tasks keep), checked when the recipe is bound. Registering a different function under a taken name is an
    error."""

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        key = name or f.__name__
        f.__term_positive__ = tuple(positive)  # type: ignore[attr-defined]
        f.__term_requires__ = tuple(requires)  # type: ignore[attr-defined]
        known = REWARD_TERMS.get(key)
        if known is not None and known is not f and _qualname(known) != _qualname(f):
            raise ValueError(f"reward term {key!r} is registered already ({_qualname(known)})")
        REWARD_TERMS[key] = f
        return f

    return register(fn) if fn is not None else register


def _qualname(f: Callable[..., Any]) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


@dataclasses.dataclass(frozen=True)
class BoundTerm:
    """A recipe entry ready to run: its name, weight and the callable `term(env) -> (num_envs,)`."""

    name: str
    weight: float
    call: Callable[[Any], Any]
    reset: Callable[[Any, Any], None] | None = None


def check_weight(field: str, weight: Any) -> float:
    """`weight` as a float; a UsageError naming `field` when it is not a finite number."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise UsageError(f"{field} = {weight!r}: give a finite number")
    return float(weight)


def term_parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The keyword parameters of a term (after `env`): a function's, or a class's constructor's."""
    target = fn.__init__ if isinstance(fn, type) else fn  # type: ignore[misc]
    params = list(inspect.signature(target).parameters.values())
    params = params[2:] if isinstance(fn, type) else params[1:]  # self, env / env
    return {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def resolved_params(term: Term, library: Mapping[str, Callable[..., Any]] | None = None) -> dict[str, Any]:
    """Every parameter of `term`: the defaults its function declares, under the recipe's own values."""
    fn = (REWARD_TERMS if library is None else library)[term.func]
    defaults = {
        name: p.default for name, p in term_parameters(fn).items() if p.default is not inspect.Parameter.empty
    }
    return {**defaults, **term.params}


def check_entry(
    name: str,
    term: Any,
    where: str,
    library: Mapping[str, Callable[..., Any]] | None = None,
    prefix: str = "",
) -> Callable[..., Any]:
    """The library function of recipe entry `name`, after every check that needs no model: a Term, a finite weight,
    a known function, known and complete parameters, positive widths. Failures are a UsageError naming the field."""
    library = REWARD_TERMS if library is None else library
    field = f"{prefix}{where}.{name}"
    if not isinstance(term, Term):
        raise UsageError(f"{field}: give Term(func, weight, params), got {term!r}")
    check_weight(f"{field}.weight", term.weight)
    fn = library.get(term.func)
    if fn is None:
        raise UsageError(
            f"{field}.func = {term.func!r}: no such reward term (known: {', '.join(sorted(library))})"
        )
    declared = term_parameters(fn)
    unknown = sorted(set(term.params) - set(declared))
    if unknown:
        raise UsageError(
            f"{field}.params.{unknown[0]}: {term.func} takes no such parameter "
            f"(its parameters: {', '.join(declared) or 'none'})"
        )
    missing = [
        p for p, d in declared.items() if d.default is inspect.Parameter.empty and p not in term.params
    ]
    if missing:
        raise UsageError(f"{field}.params.{missing[0]}: {term.func} needs this parameter")
    values = resolved_params(term, library)
    for param in getattr(fn, "__term_positive__", ()):
        value = values.get(param)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise UsageError(f"{field}.params.{param} = {value!r}: give a positive number")
    return fn


def check_recipe(
    recipe: Any, where: str, library: Mapping[str, Callable[..., Any]] | None = None, prefix: str = ""
) -> None:
    """Every entry of `recipe` through `check_entry`: what can be checked before any environment is built."""
    if not isinstance(recipe, Mapping):
        raise UsageError(f"{prefix}{where}: give a recipe, a mapping of names to Term(func, weight, params)")
    for name, term in recipe.items():
        check_entry(name, term, where, library, prefix)


def _param_error(
    prefix: str, field: str, term: Term, exc: ParamError, library: Mapping[str, Callable[..., Any]]
) -> UsageError:
    """The one line for a parameter a term refused: the field, its value (unless a mapping: too long for a line)."""
    value = resolved_params(term, library).get(exc.param)
    shown = "" if isinstance(value, Mapping) else f" = {value!r}"
    return UsageError(f"{prefix}{field}.params.{exc.param}{shown}: {exc.message}")


def check_against_model(
    recipe: Mapping[str, Term],
    model: Any,
    joint_names: Any,
    where: str,
    prefix: str = "",
    library: Mapping[str, Callable[..., Any]] | None = None,
) -> None:
    """The names the recipe's terms resolve against the robot (bodies, joint patterns), checked on a compiled model
    before any environment is built: each term class's `check(model, joint_names, **params)` (where it has one)
    raises ParamError, turned into a UsageError naming the field."""
    library = REWARD_TERMS if library is None else library
    for name, term in recipe.items():
        fn = check_entry(name, term, where, library, prefix)
        check = getattr(fn, "check", None)
        if check is None:
            continue
        try:
            check(model, joint_names, **term.params)
        except ParamError as exc:
            raise _param_error(prefix, f"{where}.{name}", term, exc, library) from None


def bind_term(
    env: Any, name: str, term: Term, where: str, library: Mapping[str, Callable[..., Any]]
) -> BoundTerm:
    """The recipe entry `name` bound to `env`: checked (`check_entry`) and, for a class, constructed, which resolves
    the names it is given against the robot. Every failure is a UsageError naming the recipe field and the robot."""
    robot = getattr(getattr(env, "robot", None), "name", None)
    prefix = f"{robot}: " if robot else ""
    fn = check_entry(name, term, where, library, prefix)
    lacking = [attr for attr in getattr(fn, "__term_requires__", ()) if not hasattr(env, attr)]
    if lacking:
        raise UsageError(
            f"{prefix}{where}.{name}.func = {term.func!r}: {type(env).__name__} keeps no `{lacking[0]}` this term "
            f"reads (a described robot's velocity task does)"
        )
    weight = float(term.weight)
    try:
        if isinstance(fn, type):
            instance = fn(env, **term.params)
            return BoundTerm(name, weight, instance, getattr(instance, "reset", None))
        params = dict(term.params)
        return BoundTerm(name, weight, lambda e: fn(e, **params))
    except ParamError as exc:
        raise _param_error(prefix, f"{where}.{name}", term, exc, library) from None


def bind_recipe(
    env: Any, recipe: Mapping[str, Term], where: str, library: Mapping[str, Callable[..., Any]] | None = None
) -> list[BoundTerm]:
    """Every entry of `recipe` with a nonzero weight, bound to `env`, in the recipe's order (zero weights are still
    checked: a typo in a disabled term is a typo)."""
    library = REWARD_TERMS if library is None else library
    robot = getattr(getattr(env, "robot", None), "name", None)
    check_recipe(recipe, where, library, f"{robot}: " if robot else "")
    return [bind_term(env, name, term, where, library) for name, term in recipe.items() if term.weight != 0.0]


def scaled(recipe: Mapping[str, Term], factor: float) -> dict[str, Term]:
    """`recipe` with every weight multiplied by `factor` (per-second weights -> per-step)."""
    return {name: dataclasses.replace(t, weight=t.weight * factor) for name, t in recipe.items()}


def with_overrides(
    recipe: Mapping[str, Term],
    weights: Mapping[str, float] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    prefix: str = "",
    library: Mapping[str, Callable[..., Any]] | None = None,
) -> dict[str, Term]:
    """A copy of `recipe` with `weights` (name -> weight) and `params` (name -> {param: value}) over its entries. A
    weight for a name the recipe lacks adds the library's term of that name; any other unknown name is a
    UsageError naming the field (`reward_weights[...]` or `reward_params[...]`, after `prefix`)."""
    library = REWARD_TERMS if library is None else library
    out = {name: dataclasses.replace(t, params=dict(t.params)) for name, t in recipe.items()}
    for name, weight in (weights or {}).items():
        where = f"{prefix}reward_weights[{name!r}]"
        w = check_weight(where, weight)
        if name in out:
            out[name].weight = w
        elif name in library:
            out[name] = Term(name, w)
        else:
            raise UsageError(
                f"{where}: no term of the recipe (its terms: {', '.join(out)}) and no reward term of the library "
                f"by that name"
            )
    for name, values in (params or {}).items():
        if name not in out:
            raise UsageError(
                f"{prefix}reward_params[{name!r}]: no term of the recipe (its terms: {', '.join(out)})"
            )
        out[name].params.update(values)
    return out
