"""Running a sweep: one run as a row that never raises (:func:`run_one`), rows as runs
complete on local worker processes or a Dask cluster (:func:`execute`), and
:func:`run_sweep`, which runs what the journal lacks, journals each row as it finishes and
writes the tables once every run has one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim import api
from kvsim.errors import InputError, clean
from kvsim.experiments.replicate import stop_pool, worker_pool
from kvsim.experiments.slo import parse_slo, with_slo
from kvsim.experiments.sweep.cluster import connect
from kvsim.experiments.sweep.journal import (
    JOURNAL,
    check_row_matches,
    journal_inside,
    journal_line,
    lock_folder,
    open_journal,
    read_journal_lines,
    unlock_folder,
)
from kvsim.experiments.sweep.spec import RunSpec, Sweep, relabel
from kvsim.experiments.sweep.tables import TABLES, flat_summary, results_table, write_table


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Run one sweep point; never raises: failures become the row's ``error``."""
    row = _row(spec)
    try:
        res = api.run(spec.base, spec.overrides(), spec.seed)
        with_slo(res, parse_slo(spec.slo) if spec.slo is not None else None)
        row.update(flat_summary(res.summary))
    except InputError as e:
        row.update(status="error", error=str(relabel(e, spec.overrides(), dict(spec.labels))))
    except Exception as e:  # a kvsim bug in one run must not stop the rest
        row.update(status="error", error=f"{type(e).__name__}: {e}")
    return row


def _row(spec: RunSpec, status: str = "ok", error: str = "") -> dict[str, Any]:
    """The columns every row of a run starts with (an ``error`` row: a run that could not
    report its own failure)."""
    head: dict[str, Any] = {"run": spec.index, "run_id": spec.run_id, **dict(spec.params)}
    return {**head, "seed": spec.seed, "status": status, "error": error}


def execute(
    todo: list[RunSpec],
    workers: int,
    scheduler: str | None = None,
    *,
    client: Any = None,
    runner: Callable[[RunSpec], dict[str, Any]] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Rows as runs complete, on local processes or a Dask cluster (``client``, or one
    connected to ``scheduler``); ``runner`` (a module-level function, for the workers;
    :func:`run_one` when not given, looked up at call time) makes each row. Closing the
    iterator early stops the workers."""
    if runner is None:
        runner = run_one
    if client is None and scheduler:
        client = connect(scheduler)
    if client is not None:
        from dask.distributed import KilledWorker, as_completed

        spec_of: dict[Any, RunSpec] = {}
        try:
            futures = []
            for s in todo:
                fut = client.submit(runner, s, pure=False, key=f"kvsim-{s.run_id}-{s.index}")
                spec_of[fut.key] = s
                futures.append(fut)
            for fut in as_completed(futures):
                try:
                    row = fut.result()
                except KilledWorker as e:  # this run killed its workers (out of memory?)
                    row = _row(spec_of[fut.key], "error", f"KilledWorker: {e}")
                yield row
        except (OSError, TimeoutError, CancelledError) as e:  # the cluster went away
            raise InputError(
                f"lost the Dask cluster ({clean(str(e) or type(e).__name__, 160)}); the runs "
                "that finished "
                "are kept: run the same command again to resume",
                where=f"--scheduler {clean(scheduler or '(a Dask client)')}",
            ) from None
        finally:
            client.close()
        return
    if workers <= 1 or len(todo) <= 1:
        for s in todo:
            yield runner(s)
        return
    pool = worker_pool(min(workers, len(todo)))
    finished = False
    try:
        pending: set[Future] = {pool.submit(runner, s) for s in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    raise InputError(
                        "a worker process was killed (out of memory? a signal?); the runs "
                        "that finished are kept: run the same command again to resume",
                        where=f"--workers {workers}",
                    ) from None
                yield row
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            stop_pool(pool)


def run_sweep(
    sweep: Sweep,
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Run the sweep's missing runs, journal each as it finishes, write the results table.

    ``progress(done, total)`` is called after each run. The results tables are written only
    when every run of the sweep has a row: on KeyboardInterrupt (or any failure) only the
    journal is kept, and tables left from before are removed, so that no table looks
    complete while runs remain (running the same command again resumes). One sweep at a
    time writes a folder (an exclusive lock; a second is refused). Nothing is left before
    the first run finishes (or unless the folder already holds a journal): a sweep refused
    or interrupted at once leaves no folder and no empty files.
    """
    if sweep.refused:  # before any run, and before anything is written
        raise sweep.refused[0]
    out = Path(out_dir)
    journal_path = out / JOURNAL
    journal_inside(journal_path)  # a link out of the folder: refused before any run
    lines = read_journal_lines(out)
    if os.path.lexists(journal_path) and not os.access(
        journal_path, os.W_OK
    ):  # refused before any run, not after
        raise InputError("cannot write: permission denied", where=str(journal_path))
    by_id = {r.run_id: r for r in sweep.runs}
    for run_id, (lineno, row) in lines.items():
        if run_id in by_id:
            check_row_matches(row, by_id[run_id], f"{journal_path}:{lineno}")
    done = {k: row for k, (_, row) in lines.items()}
    client = connect(scheduler) if scheduler else None  # refused before anything is written
    made = not out.exists()
    lock = None
    try:
        lock = lock_folder(out)
        again = {k: n for k, (n, _) in read_journal_lines(out).items()} if lock is not None else {}
        if lock is not None and again != {k: n for k, (n, _) in lines.items()}:
            # another sweep appended rows before this one took the lock: start again
            raise InputError(
                "another kvsim sweep wrote to this folder meanwhile; run the command again",
                where=str(out),
            )
    except BaseException:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if lock is not None:
            unlock_folder(lock, out, remove=made and not os.path.lexists(journal_path))
        raise
    todo = [
        r
        for r in sweep.runs
        if r.run_id not in done or (retry_failed and done[r.run_id].get("status") != "ok")
    ]
    finished = len(sweep.runs) - len(todo)
    journal = None
    complete = False
    table: pd.DataFrame | None = None
    try:
        rows = execute(todo, workers, scheduler, client=client)
        with contextlib.closing(rows):
            if progress:
                progress(finished, len(sweep.runs))
            for row in rows:
                if journal is None:
                    journal = open_journal(out)
                try:
                    journal.write(journal_line(row))
                    journal.flush()
                except OSError as e:
                    raise InputError(
                        f"cannot write: {e.strerror or e}", where=str(journal_path)
                    ) from None
                done[row["run_id"]] = row
                finished += 1
                if progress:
                    progress(finished, len(sweep.runs))
        ran = [done[r.run_id] for r in sweep.runs if r.run_id in done]
        complete = len(ran) == len(sweep.runs)
        table = results_table(sweep, ran)
        table.attrs["reused"] = len(sweep.runs) - len(todo)  # rows from the journal
        if complete:
            write_table(table, out)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if journal is not None:
            with contextlib.suppress(OSError):
                journal.close()
        if not complete:  # tables of an earlier, smaller state would look complete
            for name in TABLES:
                with contextlib.suppress(OSError):
                    (out / name).unlink(missing_ok=True)
        unlock_folder(lock, out, remove=made and not os.path.lexists(journal_path))
    assert table is not None
    return table
