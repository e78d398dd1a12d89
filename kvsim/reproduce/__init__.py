"""Reproductions of published studies, each from its own scenarios; ``STUDIES`` maps the
names ``kvsim reproduce NAME`` accepts to their modules."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from kvsim.errors import InputError


def study(name: str) -> ModuleType:
    """The module reproducing a study (``paper`` is the remote-KV-tier study,
    ``vllm-offload`` vLLM's KV offloading connector blog, ``central-nvme`` the central
    NVMe KV store's vendor claims; ``all``, every study with a validation summary, is
    :mod:`kvsim.reproduce.validation`)."""
    from kvsim.reproduce import central_nvme, remote_kv_tiers, vllm_offload

    studies = {
        "paper": remote_kv_tiers,
        "remote-kv-tiers": remote_kv_tiers,
        "vllm-offload": vllm_offload,
        "central-nvme": central_nvme,
    }
    if name not in studies:
        raise InputError(f"unknown study {name!r}; choose one of {sorted([*studies, 'all'])}")
    return studies[name]


def check_files(paths: Iterable[Path]) -> None:
    """Load (and so check) every scenario file a study will run, before its first run: a
    typo in the last one is refused at once, by file and line, not after minutes of the
    others' runs. Each study's ``scenario_files(folder)`` lists its files; ``kvsim
    reproduce all`` checks every study's before any runs."""
    from kvsim import api

    for p in paths:
        api.load(p)
