"""The studies ``kvsim reproduce NAME`` knows: this module owns :data:`STUDIES`, the map
from each name to the module reproducing that study, and :func:`study`, its lookup."""

from __future__ import annotations

from types import ModuleType

from kvsim.errors import InputError
from kvsim.reproduce import (
    central_nvme,
    lmcache_gke,
    lmcache_longdoc,
    paper_catalogue,
    remote_kv_tiers,
    vllm_offload,
)

#: ``paper`` is the remote-KV-tier study, ``vllm-offload`` vLLM's KV offloading connector
#: blog, ``central-nvme`` the central NVMe KV store's vendor claims, ``paper-catalogue``
#: the paper's scenarios on the catalogue-composed profile, ``lmcache-longdoc`` LMCache's
#: cookbooks (Long Doc QA on one A40), ``lmcache-gke`` Google's LMCache-on-GKE benchmark
#: (Llama-3.3-70B on 8 x H100, HBM vs CPU RAM and local SSD tiers)
STUDIES: dict[str, ModuleType] = {
    "paper": remote_kv_tiers,
    "remote-kv-tiers": remote_kv_tiers,
    "paper-catalogue": paper_catalogue,
    "vllm-offload": vllm_offload,
    "lmcache-longdoc": lmcache_longdoc,
    "lmcache-gke": lmcache_gke,
    "central-nvme": central_nvme,
}


def study(name: str) -> ModuleType:
    """The module reproducing a study (a name of :data:`STUDIES`; ``all``, every study
    with a validation summary, is :mod:`kvsim.reproduce.validation`)."""
    if name not in STUDIES:
        raise InputError(f"unknown study {name!r}; choose one of {sorted([*STUDIES, 'all'])}")
    return STUDIES[name]
