"""Benchmark: SimPy events per request, by what each one wakes, and which carry no time.

    python benchmarks/events.py replay [--trace PATH]
    python benchmarks/events.py scale [--requests 20000]

Runs the conversation replay or the first N requests of ``benchmarks/scale.yaml`` and
counts every event SimPy processes, named by the process it resumes (an engine's step
loop, the arrivals) or the callback it calls (the fabric's timer, a restore's step), and
whether it was scheduled with no delay: a hand-off at the same instant (an idle engine
woken by an arrival) rather than time passing. Either core; both process the same events.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import Any

import simpy
from simpy.core import Environment
from workloads import arguments, simulation


def wakes(event: simpy.Event) -> str:
    """What processing ``event`` runs: the resumed process's function, or the callback."""
    names = []
    for cb in event.callbacks or ():
        owner = getattr(cb, "__self__", None)
        if isinstance(owner, simpy.Process):
            gen = owner._generator
            name = getattr(gen, "__qualname__", "") or type(gen).__name__
            # a compiled generator's type is named like _loop_Engine_gen
            m = re.fullmatch(r"(\w+?)_([A-Z]\w*)_gen", name)
            names.append(f"{m[2]}.{m[1]}" if m else name)
        else:
            names.append(getattr(cb, "__qualname__", type(cb).__name__))
    return ", ".join(names) or "(nothing)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments(ap)
    args = ap.parse_args()

    zero: set[int] = set()  # ids of events scheduled with no delay, not yet processed
    counts: Counter[tuple[str, str, bool]] = Counter()
    schedule, step = Environment.schedule, Environment.step

    def counting_schedule(env: Environment, event: Any, priority: int = 1, delay: Any = 0) -> None:
        if delay == 0:
            zero.add(id(event))
        schedule(env, event, priority, delay)

    def counting_step(env: Environment) -> None:
        if env._queue:
            event = env._queue[0][3]
            key = id(event)
            counts[type(event).__name__, wakes(event), key in zero] += 1
            zero.discard(key)
        step(env)

    Environment.schedule = counting_schedule  # type: ignore[method-assign]
    Environment.step = counting_step  # type: ignore[method-assign]
    try:  # counting from the start: the engines' first events are scheduled as they are built
        out = simulation(args.workload, args.trace, args.requests).run()
    finally:
        Environment.schedule, Environment.step = schedule, step  # type: ignore[method-assign]
    n = len(out.rows)
    total = sum(counts.values())
    print(f"{n:,} requests, {total:,} events: {total / n:.2f} per request")
    print(f"  {'event':<10} {'wakes':<48} {'per request':>11}  no delay")
    for (kind, what, instant), c in counts.most_common():
        print(f"  {kind:<10} {what[:48]:<48} {c / n:>11.3f}  {'yes' if instant else ''}")


if __name__ == "__main__":
    main()
