"""``kvsim validate``: load and check a scenario (its whole workload and its GPU memory
pools) and run nothing."""

from __future__ import annotations

import argparse

from kvsim.api import load
from kvsim.config.pools import pools, too_large
from kvsim.config.schema import lookup_order
from kvsim.errors import InputError, clean
from kvsim.physics.hbm import pool_lines
from kvsim.plugins.registry import disabled, skipped, unchecked
from kvsim.workload import open_workload
from kvsim.workload.request import check_request


def _cmd_validate(args: argparse.Namespace) -> int:
    sc = load(args.scenario, args.overrides)
    w = sc.workload
    n = 0
    longest = 0  # the largest prompt must fit the node's KV pool
    for req in open_workload(w, sc.seed):  # reads the whole trace: bad lines show up here
        check_request(req, w.block_tokens)
        n += 1
        if req.input_tokens > longest:
            longest = req.input_tokens
            why = too_large(sc, longest)
            if why is not None:
                raise InputError(f"request {req.id}: {why}", where="workload")
    if n == 0:
        raise InputError(
            "workload: no requests (check workload.window and limit)", where=args.scenario
        )
    print(
        f"ok: {args.scenario}: scenario {sc.name!r}, profile {sc.profile}, "
        f"{sc.cluster.engines} engine(s), {sc.cluster.load_policy} loading, {w.kind} workload "
        f"of {n} requests"
    )
    print(f"lookup order: {' -> '.join(lookup_order(sc))}")
    for line in pool_lines(pools(sc)):
        print(line)
    if disabled():
        if skipped():
            print(f"not imported (--no-plugins): {', '.join(map(clean, skipped()))}")
        if unchecked():  # names only the plugins' code could have checked
            print(f"not checked (their plugin code was not run): {', '.join(unchecked())}")
    return 0
