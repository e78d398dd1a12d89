"""GPU cards' NVLink domain (kvsim/catalogue/gpus.py): the shipped values, the default for a
card that leaves it out, and a bad value refused at its line with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.catalogue.gpus import DEFAULT_NVLINK_DOMAIN, read_gpu
from kvsim.cli import main

CARD = """\
name: My-GPU
generation: hopper
flops:
  bf16: 1 PFLOP/s
hbm: 96 GiB
hbm_bandwidth: 4 TB/s
host_link: PCIe Gen5 x16
host_link_per_direction: 64 GB/s
nvlink_per_gpu: 450 GB/s
nic_per_gpu: 400 Gb/s
"""


def _card(tmp_path: Path, text: str) -> str:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    return str(path)


def test_default_domain_is_an_8_gpu_board_marked_l(tmp_path):
    c = read_gpu(_card(tmp_path, CARD))
    assert DEFAULT_NVLINK_DOMAIN == 8
    assert c.nvlink_domain == 8 and c.defaulted == ("nvlink_domain",)
    assert c.source_of("nvlink_domain").startswith("L: ")
    assert c.sources == {}  # the default's source is not written into the card's own


def test_no_nvlink_defaults_to_a_domain_of_one(tmp_path):
    c = read_gpu(_card(tmp_path, CARD.replace("450 GB/s", "0 GB/s")))
    assert c.nvlink_per_gpu == 0 and c.nvlink_domain == 1 and c.defaulted == ("nvlink_domain",)


def test_given_domain_is_read(tmp_path):
    text = CARD + "nvlink_domain: 72\nsources: {nvlink_domain: 'H: GB200 NVL72'}\n"
    c = read_gpu(_card(tmp_path, text))
    assert c.nvlink_domain == 72 and c.defaulted == ()
    assert c.source_of("nvlink_domain") == "H: GB200 NVL72"


@pytest.mark.parametrize(
    ("line", "nvlink", "words"),
    [
        ("nvlink_domain: 0", "450 GB/s", "outside the physical range 1 .. 4096"),
        ("nvlink_domain: 5000", "450 GB/s", "outside the physical range"),
        ("nvlink_domain: 1.5", "450 GB/s", "expected a whole number of GPUs"),
        ("nvlink_domain: '8'", "450 GB/s", "expected a whole number of GPUs"),
        ("nvlink_domain: true", "450 GB/s", "expected a whole number of GPUs"),
        ("nvlink_domain: 8", "0 GB/s", "with nvlink_per_gpu 0 (no NVLink)"),
        ("nvlink_domain: 1", "450 GB/s", "has no NVLink peers"),
    ],
)
def test_bad_domain_refused_at_its_line(tmp_path, capsys, line, nvlink, words):
    path = _card(tmp_path, CARD.replace("450 GB/s", nvlink) + line + "\n")
    assert main(["profiles", "show", "llama-3.1-8b", path]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"kvsim: error: {path}:11: nvlink_domain: "), err
    assert words in err, err


def test_shipped_domains():
    # GB200 NVL72's 72-GPU domain is the only one over 8, the PCIe-only L20 (no NVLink)
    # the only domain of 1
    domains = {
        n: read_gpu(n).nvlink_domain for n in ("GB200", "L20", "H20", "H800", "MI300X", "B300")
    }
    assert domains == {"GB200": 72, "L20": 1, "H20": 8, "H800": 8, "MI300X": 8, "B300": 8}


def test_new_cards_compose(capsys):
    # the new cards give a finite composition (kvsim profiles show exits 0)
    for model, gpu, extra in (
        ("llama-3.1-70b-awq", "L20", []),
        ("llama-3.1-70b-awq", "H20", []),
        ("llama-3.1-8b", "A100-40GB", []),
        ("deepseek-v3", "H800", ["--gpus", "16", "--ep", "16"]),
        ("kimi-k2-thinking", "H20", ["--gpus", "8", "--ep", "8"]),
    ):
        assert main(["profiles", "show", model, gpu, *extra]) == 0, (model, gpu)
    capsys.readouterr()
