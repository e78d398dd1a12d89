"""Reproductions of published studies, each from its own scenarios: this package owns one
module per study (:mod:`~kvsim.reproduce.remote_kv_tiers`, :mod:`~kvsim.reproduce.vllm_offload`,
:mod:`~kvsim.reproduce.central_nvme`), their registry (:mod:`kvsim.reproduce.studies`),
the scenario-file check they share (:mod:`kvsim.reproduce.checks`), the range runs
(:mod:`kvsim.reproduce.ranges`) and the validation summary of them all
(:mod:`kvsim.reproduce.validation`)."""
