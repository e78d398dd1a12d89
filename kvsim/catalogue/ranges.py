"""Prediction ranges of a composed profile: each predicted figure over the catalogue's
assumptions' documented ranges.

What this module owns: :func:`inputs` (a composition's assumptions as the screen's inputs:
each at its ``lo`` and ``hi``, as ``profile.assume.NAME`` overrides), :func:`lone_figures`
(the figures a composition predicts alone: a lone cold 16k prompt's TTFT and prefill, a
GPU hit's TTFT at 1k and 64k tokens) and :func:`lone_ranges`. The screen itself is
:func:`kvsim.reproduce.ranges.screen`, as ``kvsim reproduce paper`` runs it: every
assumption moved to each end of its range alone, an assumption listed in a figure's
``sensitive_to`` when an end moves it by more than 10%, then every corner of the two that
move it most, whatever their size (small moves add up); the range is the least and
greatest value seen (:func:`prediction_ranges`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kvsim.catalogue.compose import Composition
from kvsim.physics.step import lone_seconds
from kvsim.reproduce.ranges import THRESHOLD, Input, Range, Setting, screen

#: the two assumptions whose corners are run per figure
CORNERS = 2


def inputs(comp: Composition) -> list[Input]:
    """The composition's assumptions with a range (lo < hi) as screen inputs."""
    out = []
    for name, a in comp.assume.items():
        if a.lo < a.hi:
            out.append(
                Input(
                    name=name,
                    field=f"profile.assume.{name}",
                    configs=(),
                    shipped=a.text(),
                    lo=a.text(a.lo),
                    hi=a.text(a.hi),
                    source=a.source,
                    mark=a.mark,
                )
            )
    return out


def lone_figures(
    comp: Composition, per_step: int = 8192, cuda_graphs: bool = True
) -> dict[str, float]:
    """What the composition predicts for a request alone on an idle engine: a cold
    16,384-token prompt's prefill and TTFT (its frontend in and out included), and the
    TTFT of a 1,024- and a 65,536-token prompt whose prefix is all in HBM (a block is
    always recomputed: vLLM caps a hit at the prompt less one token, and recomputes the
    last block's tokens, ``frontend.block_tokens``). ``cuda_graphs`` false: eager mode."""
    steps = comp.step_model(cuda_graphs)
    t16 = lone_seconds(steps, 16384, 0, per_step)
    out = {
        "lone_16k_s": t16,
        "lone_16k_ttft_s": t16 + comp.frontend_seconds(16384),
    }
    for n, name in ((1024, "gpu_hit_1k_ttft_s"), (65536, "gpu_hit_64k_ttft_s")):
        block = 16
        new = block  # the last block is recomputed
        out[name] = lone_seconds(steps, new, n - new, per_step) + comp.frontend_seconds(n)
    return out


def lone_ranges(
    comp: Composition,
    per_step: int = 8192,
    figures: Sequence[str] | None = None,
    cuda_graphs: bool = True,
) -> dict[str, Range]:
    """:func:`lone_figures` over the assumptions' ranges (see the module docstring)."""
    base = lone_figures(comp, per_step, cuda_graphs)
    names = list(figures) if figures is not None else list(base)
    shipped = {f: base[f] for f in names}

    def evaluate(setting: Setting, wanted: Sequence[str]) -> Mapping[str, float]:
        a = comp.assume
        for name, end in setting:
            a = a.at(name, end)
        got = lone_figures(comp.with_assumptions(a), per_step, cuda_graphs)
        return {f: got[f] for f in wanted}

    return prediction_ranges(shipped, inputs(comp), lambda f, i: True, evaluate)


def prediction_ranges(
    figures: Mapping[str, float],
    ins: Sequence[Input],
    affects: Callable[[str, Input], bool],
    evaluate: Callable[[Setting, Sequence[str]], Mapping[str, float]],
) -> dict[str, Range]:
    """:func:`kvsim.reproduce.ranges.screen` for a prediction: every input at each end
    of its range, and every corner of the two that move a figure most (whatever their
    size: small moves add up); the range spans all of them. ``sensitive_to`` lists the
    inputs whose end moves the figure by more than 10% (THRESHOLD)."""
    out = screen(figures, ins, affects, evaluate, threshold=0.0, corners=CORNERS)
    for f, r in out.items():
        sizes = {n: max(abs(m) for m in r.moves[n]) for n in r.moves}
        big = tuple(n for n in r.sensitive_to if sizes[n] > THRESHOLD)
        out[f] = replace(r, sensitive_to=big)
    return out


def range_text(r: Range, unit: str = "s", digits: int = 3) -> str:
    """ "0.31 s (range 0.22-0.48 s; sensitive to dense.e_max, cpu.per_step)"."""
    v = f"{r.shipped:.{digits}g}"
    rng = f"range {r.lo:.{digits}g}-{r.hi:.{digits}g} {unit}"
    if r.sensitive_to:
        return f"{v} {unit} ({rng}; sensitive to {', '.join(r.sensitive_to)})"
    sizes = {n: max(abs(m) for m in moves) for n, moves in r.moves.items()}
    top = max(sizes, key=lambda n: sizes[n]) if sizes else ""
    most = f"; most sensitive to {top}, under 10%" if top and sizes[top] > 0 else ""
    return f"{v} {unit} ({rng}{most})"
