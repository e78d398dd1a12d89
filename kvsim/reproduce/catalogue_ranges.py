"""Prediction ranges of a study run on composed profiles: each predicted figure over the
catalogue's assumptions' documented ranges.

What this module owns: :func:`study_ranges`, the one mechanism ``kvsim reproduce`` uses
for studies whose scenarios compose their profile from the catalogue (``profile: {model,
gpu, ...}``): ``paper-catalogue``, ``vllm-offload``, ``lmcache-longdoc`` and ``lmcache-gke``.
It is the screen ``kvsim run`` and ``kvsim profiles show`` run on a composed profile
(:func:`kvsim.catalogue.ranges.prediction_ranges` over
:func:`kvsim.catalogue.ranges.inputs`, filtered by
:func:`kvsim.experiments.predict.applies`): every assumption moved to each end of its
range alone (``--set profile.assume.NAME=VALUE`` on every scenario file of the study),
then every corner of the two that move a figure most; a figure's range spans them all,
and ``sensitive_to`` names the assumptions whose end moves it by more than 10%. It also
owns the tables of such a study's figures (:func:`study_text`, :func:`study_markdown`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvsim import api
from kvsim.catalogue.ranges import inputs, prediction_ranges
from kvsim.experiments.predict import applies, composition
from kvsim.report import columns
from kvsim.reproduce.ranges import Input, Range, Setting, setting_text

RunWith = Callable[[list[str]], Mapping[str, float]]


def study_inputs(files: Sequence[Path]) -> list[Input]:
    """The catalogue assumptions that can change a run of any of ``files`` (each file's
    composition; a file on a named profile adds none)."""
    chosen: dict[str, Input] = {}
    for path in files:
        sc = api.load(path)
        comp = composition(sc, Path(path).resolve().parent)
        if comp is None:
            continue
        for i in inputs(comp):
            if i.name not in chosen and applies(i.name, sc, comp):
                chosen[i.name] = i
    return list(chosen.values())


def study_ranges(
    files: Sequence[Path],
    figures: Mapping[str, float],
    run_with: RunWith,
    log: Callable[[str], None] = lambda _msg: None,
    base: Mapping[str, float] | None = None,
    affects: Callable[[str, Input], bool] | None = None,
) -> dict[str, Range]:
    """``figures`` (name: kvsim's value as shipped) over the assumptions of ``files``.
    ``run_with(overrides)`` gives every figure with ``--set``-style overrides applied to
    each of the study's scenario files; ``base``: its values with none (the paired base;
    None: ``run_with([])`` is run, as when the range runs are smaller than the study's);
    ``affects(figure, input)``: whether an input can move a figure (default: all)."""
    ins = study_inputs(files)
    if not ins or not figures:
        return {}
    by_name = {i.name: i for i in ins}
    cache: dict[Setting, Mapping[str, float]] = {}
    if base is not None:
        cache[()] = base

    def evaluate(setting: Setting, wanted: Sequence[str]) -> Mapping[str, float]:
        if setting not in cache:
            if setting:
                log(f"ranges [{len(cache)}]: {setting_text(setting, by_name)}")
            cache[setting] = run_with([by_name[n].override(e) for n, e in setting])
        return {f: float(cache[setting][f]) for f in wanted}

    return prediction_ranges(figures, ins, affects or (lambda _f, _i: True), evaluate)


def range_cell(rep: Any, name: str) -> str:
    """A figure's range as a table cell ('-' when not screened)."""
    rg = (getattr(rep, "ranges", None) or {}).get(name)
    if rg is None:
        return "-"
    return f"{rg.lo:.3g}" if rg.lo == rg.hi else f"{rg.lo:.3g} .. {rg.hi:.3g}"


def figure_table(rep: Any, fmt: Callable[[Any], str], verdict: bool = False) -> list[str]:
    """A study's figures as Markdown table lines (header included): what each is, its kind,
    published and kvsim values, its range and what it is sensitive to, its unit and ratio;
    ``verdict``: a last column with the study's verdict on the figure (``rep.verdict``)."""
    lines = [
        "| figure | what | kind | published | kvsim | range | sensitive to | unit "
        "| kvsim/published |" + (" verdict |" if verdict else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if verdict else ""),
    ]
    for r in rep.rows:
        rg = (rep.ranges or {}).get(r.figure.name)
        sens = ", ".join(rg.sensitive_to) if rg and rg.sensitive_to else "-"
        line = (
            f"| `{r.figure.name}` | {r.figure.what} | {r.figure.kind} | {fmt(r.figure.paper)} "
            f"| {fmt(r.kvsim)} | {range_cell(rep, r.figure.name)} | {sens} | {r.figure.unit} "
            f"| {fmt(r.ratio)} |"
        )
        lines.append(line + (f" {rep.verdict(r) or '-'} |" if verdict else ""))
    return lines


def sensitive_lines(rep: Any) -> list[str]:
    """'sensitive to' lines for a terminal: each screened figure's sensitive inputs."""
    ranges = getattr(rep, "ranges", None) or {}
    lines = [f"  {n}: {', '.join(r.sensitive_to)}" for n, r in ranges.items() if r.sensitive_to]
    if not lines:
        return []
    return ["sensitive to (moved by more than 10% over the assumption's range):", *lines]


def ranges_markdown(rep: Any) -> list[str]:
    """The catalogue ranges as a Markdown section: each screened figure's range, the
    assumptions moving it by more than 10% and the one moving it most."""
    ranges = getattr(rep, "ranges", None)
    if ranges is None:
        return ["", "Catalogue ranges were not run (`--no-ranges`)."]
    lines = [
        "",
        "## Ranges over the catalogue's assumptions",
        "",
        "Each assumption of the composed profile with a documented range "
        "(kvsim/catalogue/assumptions.py; docs/catalogue.md) that can change the study's "
        "runs, at each end alone, then every corner of the two moving a figure most "
        "(kvsim/reproduce/catalogue_ranges.py). **sensitive to**: an end moves the figure "
        "by more than 10%.",
        "",
        "| figure | range | sensitive to | moved most by (low / high end) |",
        "|---|---|---|---|",
    ]
    for name, rg in ranges.items():
        sizes = {n: max(abs(m) for m in mv) for n, mv in rg.moves.items()}
        top = max(sizes, key=lambda n: sizes[n]) if sizes else ""
        most = (
            f"`{top}` ({rg.moves[top][0]:+.0%} / {rg.moves[top][1]:+.0%})"
            if top and sizes[top] > 0
            else "-"
        )
        sens = ", ".join(f"`{n}`" for n in rg.sensitive_to) or "-"
        lines.append(f"| `{name}` | {range_cell(rep, name)} | {sens} | {most} |")
    return lines


def study_text(
    rep: Any,
    study: str,
    not_modelled: Mapping[str, str],
    fmt: Callable[[Any], str],
    screened: str = "",
) -> str:
    """A deterministic study's side-by-side table for a terminal, with each figure's range
    (``screened``: which figures the ranges cover, when not all), what each is sensitive
    to and what the study leaves out (``not_modelled``)."""
    head = ("figure", "published", "kvsim", "range", "unit", "kvsim/published", "kind")
    body = [
        (
            r.figure.name,
            fmt(r.figure.paper),
            fmt(r.kvsim),
            range_cell(rep, r.figure.name),
            r.figure.unit,
            fmt(r.ratio),
            r.figure.kind,
        )
        for r in rep.rows
    ]
    return "\n".join(
        [
            f"validating against {study}: deterministic runs (the interval is the point); "
            f"range: over the catalogue's assumptions{screened} (--no-ranges: not run)",
            *columns([head, *body], left=(0, 4, 6)),
            *sensitive_lines(rep),
            f"not modelled: {', '.join(not_modelled)} (docs/validation.md)",
        ]
    )


def study_markdown(
    rep: Any,
    study: str,
    source: str,
    kinds: Mapping[str, str],
    not_modelled: Mapping[str, str],
    fmt: Callable[[Any], str],
) -> str:
    """The same table as Markdown: the study, its source and the figures' kinds, the
    figures, and what it leaves out."""
    lines = [
        f"# Validation: {study}",
        "",
        f"Source: {source}. Kinds: " + "; ".join(f"**{k}**: {v}" for k, v in kinds.items()) + ".",
        "",
        *figure_table(rep, fmt),
        "",
        "Not modelled:",
        "",
        *(f"- `{k}`: {v}" for k, v in not_modelled.items()),
    ]
    return "\n".join(lines) + "\n"
