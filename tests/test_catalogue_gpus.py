"""GPU cards and achievable efficiency (kvsim/catalogue/gpus.py, efficiency.py).

Every expected number is written out from the vendor datasheet it comes from (cited beside
it), so a card that drifts from its datasheet fails here.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvsim.catalogue.efficiency import (
    OPS,
    PARAMS,
    curve,
    generations,
    host_link_frac,
    narrow,
)
from kvsim.catalogue.efficiency import (
    dtypes as eff_dtypes,
)
from kvsim.catalogue.gpus import (
    GENERATIONS,
    GPU_DIR,
    SOURCED,
    SPARSITY_FACTOR,
    list_gpus,
    read_gpu,
)
from kvsim.errors import InputError

from conftest import examples

T, P = 1e12, 1e15
GB, TBs, GBs, Gbs = 1e9, 1e12, 1e9, 1e9 / 8
GiB = 2**30  # HBM capacity: the datasheets' "GB" of HBM is binary (issue 39)

# name -> (generation, dense FLOP/s per dtype, HBM bytes, HBM B/s, host link B/s one way,
#          NVLink B/s one way, NIC B/s), each from the datasheet as the comment says
# (H20, H800 and L20 have no public NVIDIA datasheet: from the secondary sources their
# cards cite, marked M)
DATASHEET = {
    # A100 datasheet: BF16 312 | 624* TFLOPS; 80 GB HBM2e at 2,039 GB/s; PCIe Gen4 64 GB/s
    # (both ways); NVLink 600 GB/s (both ways); DGX A100: ConnectX-6 200 Gb/s per GPU
    "A100-80GB": (
        "ampere",
        {"bf16": 312 * T},
        80 * GiB,
        2039 * GBs,
        32 * GBs,
        300 * GBs,
        200 * Gbs,
    ),
    # A100 datasheet, 40GB SXM: the 80GB part's rates; 40 GB HBM2 at 1,555 GB/s; DGX A100
    # (40GB): ConnectX-6 200 Gb/s per GPU
    "A100-40GB": (
        "ampere",
        {"bf16": 312 * T},
        40 * GiB,
        1555 * GBs,
        32 * GBs,
        300 * GBs,
        200 * Gbs,
    ),
    # A40 datasheet: BF16 149.7 | 299.4* TFLOPS; 48 GB GDDR6 at 696 GB/s; PCIe Gen4 64 GB/s and
    # NVLink 112.5 GB/s (both ways); no network in the datasheet (L: 200 Gb/s)
    "A40": (
        "ampere",
        {"bf16": 149.7 * T},
        48 * GiB,
        696 * GBs,
        32 * GBs,
        56.25 * GBs,
        200 * Gbs,
    ),
    # H100 SXM datasheet: BF16 1,979* / FP8 3,958* TFLOPS (*sparse); 80 GB at 3.35 TB/s;
    # PCIe Gen5 128 GB/s and NVLink 900 GB/s (both ways); DGX H100: ConnectX-7 400 Gb/s
    "H100-SXM": (
        "hopper",
        {"bf16": 989.5 * T, "fp8": 1979 * T},
        80 * GiB,
        3.35 * TBs,
        64 * GBs,
        450 * GBs,
        400 * Gbs,
    ),
    # H200 datasheet: the H100's rates; 141 GB at 4.8 TB/s
    "H200": (
        "hopper",
        {"bf16": 989.5 * T, "fp8": 1979 * T},
        141 * GiB,
        4.8 * TBs,
        64 * GBs,
        450 * GBs,
        400 * Gbs,
    ),
    # H20 (LMSYS/Ant Group table, aiconfigurator h20_sxm.yaml): BF16 148 / FP8 296 TFLOPS
    # dense; 96 GB HBM3 at 4.0 TB/s; PCIe Gen5 (64 GB/s one way); NVLink 900 GB/s both ways
    "H20": (
        "hopper",
        {"bf16": 148 * T, "fp8": 296 * T},
        96 * GiB,
        4.0 * TBs,
        64 * GBs,
        450 * GBs,
        400 * Gbs,
    ),
    # H800 (aiconfigurator h800_sxm.yaml): H100 SXM's rates and HBM; NVLink 400 GB/s both
    # ways (200 one way); one 400 Gb/s InfiniBand NIC per GPU (DeepSeek-V3: 50 GB/s)
    "H800": (
        "hopper",
        {"bf16": 989.5 * T, "fp8": 1979 * T},
        80 * GiB,
        3.35 * TBs,
        64 * GBs,
        200 * GBs,
        400 * Gbs,
    ),
    # L20 (secondary sources): FP16/BF16 119.5 TFLOPS dense, no FP8 figure; 48 GB GDDR6 at
    # 864 GB/s; PCIe Gen4 x16 (32 GB/s one way); no NVLink; 200 Gb/s network
    "L20": (
        "ada",
        {"bf16": 119.5 * T},
        48 * GiB,
        864 * GBs,
        32 * GBs,
        0.0,
        200 * Gbs,
    ),
    # HGX B200 per GPU: FP4 18 / FP8 9 / BF16 4.5 PFLOPS (sparse); 180 GB at 7.7 TB/s;
    # PCIe Gen5 128 GB/s, NVLink 1.8 TB/s (both ways); DGX B200: ConnectX-7 400 Gb/s
    "B200": (
        "blackwell",
        {"bf16": 2.25 * P, "fp8": 4.5 * P, "fp4": 9 * P},
        180 * GiB,
        7.7 * TBs,
        64 * GBs,
        900 * GBs,
        400 * Gbs,
    ),
    # HGX B300 (8 GPUs): FP4 144 sparse | 105 dense PFLOPS, FP8 72*, BF16 36* (*sparse);
    # 288 GB at 8 TB/s; host CPU on PCIe Gen5 (64 GB/s one way); ConnectX-8 800 Gb/s
    "B300": (
        "blackwell-ultra",
        {"bf16": 2.25 * P, "fp8": 4.5 * P, "fp4": 105 / 8 * P},
        288 * GiB,
        8 * TBs,
        64 * GBs,
        900 * GBs,
        800 * Gbs,
    ),
    # GB200 NVL72 per GPU: FP4 20 / FP8 10 / BF16 5 PFLOPS (sparse); 186 GB at 8 TB/s;
    # NVLink-C2C 900 GB/s both ways shared by two GPUs: 900 / 2 / 2 = 225 GB/s one way
    "GB200": (
        "blackwell",
        {"bf16": 2.5 * P, "fp8": 5 * P, "fp4": 10 * P},
        186 * GiB,
        8 * TBs,
        225 * GBs,
        900 * GBs,
        400 * Gbs,
    ),
    # AMD MI300X data sheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS dense; 192 GB HBM3 at
    # 5.3 TB/s; PCIe Gen5 128 GB/s; 7 Infinity Fabric links x 128 GB/s (both ways)
    "MI300X": (
        "cdna3",
        {"bf16": 1307.4 * T, "fp8": 2614.9 * T},
        192 * GiB,
        5.3 * TBs,
        64 * GBs,
        448 * GBs,
        400 * Gbs,
    ),
    # AMD MI355X data sheet: BF16 2.5 / FP8 5.0 / MXFP4 10 PFLOPS dense; 288 GB HBM3E at
    # 8 TB/s; PCIe Gen5 128 GB/s; 7 Infinity Fabric links x 153.6 GB/s (both ways)
    "MI355X": (
        "cdna4",
        {"bf16": 2516.6 * T, "fp8": 5033.2 * T, "fp4": 10066.3 * T},
        288 * GiB,
        8 * TBs,
        64 * GBs,
        537.6 * GBs,
        400 * Gbs,
    ),
}


# GPUs per NVLink domain: 8 on every HGX/DGX board and AMD 8-OAM platform (DGX A100/H100/
# H200/B200/B300 datasheets, MI300X/MI355X platforms; HGX H20/H800: 8-way servers), 72 in
# GB200 NVL72, 1 for the L20 (a PCIe card without NVLink)
NVLINK_DOMAIN = {name: 8 for name in DATASHEET} | {"GB200": 72, "L20": 1, "A40": 2}


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


# ---- cards against their datasheets -------------------------------------------------------


def test_shipped_cards_are_the_datasheets() -> None:
    assert sorted(g["name"] for g in list_gpus()) == sorted(DATASHEET)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_card_matches_datasheet(name: str) -> None:
    gen, flops, hbm, hbm_bw, host, nvlink, nic = DATASHEET[name]
    c = read_gpu(name)
    assert c.name == name and c.generation == gen
    assert set(c.flops) == set(flops)
    for dtype, rate in flops.items():
        assert close(c.flops[dtype], rate), (dtype, c.flops[dtype], rate)
        assert close(c.dense_flops(dtype), rate)
    assert close(c.hbm, hbm)
    assert close(c.hbm_bandwidth, hbm_bw)
    assert close(c.host_link_per_direction, host)
    assert close(c.nvlink_per_gpu, nvlink)
    assert close(c.nic_per_gpu, nic)
    assert c.nvlink_domain == NVLINK_DOMAIN[name] and c.defaulted == ()


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_every_number_has_a_marked_source(name: str) -> None:
    c = read_gpu(name)
    assert c.description
    for f in SOURCED:
        assert c.sources.get(f, "")[:2] in ("H:", "M:"), (name, f)


def test_sparse_figures_are_halved() -> None:
    # H100 SXM datasheet: BF16 1,979 TFLOPS with sparsity -> 1,979 / 2 = 989.5 dense
    assert SPARSITY_FACTOR == 2.0
    assert close(read_gpu("H100-SXM").flops["bf16"], 1979e12 / 2)
    # A100: 624 sparse -> 312 dense, the datasheet's own dense figure
    assert close(read_gpu("A100-80GB").flops["bf16"], 312e12)
    # B300: the dense FP4 figure (105 PFLOPS / 8 = 13.125) wins over half the sparse one
    # (144 / 8 / 2 = 9): Blackwell Ultra's dense FP4 is not half its sparse rate
    b300 = read_gpu("B300")
    assert close(b300.flops["fp4"], 13.125e15) and not close(b300.flops["fp4"], 9e15)


def test_unsupported_dtype_is_refused() -> None:
    a100 = read_gpu("A100")
    assert "fp8" not in a100.flops and "fp4" not in read_gpu("H100").flops
    with pytest.raises(InputError, match="A100-80GB has no fp8"):
        a100.dense_flops("fp8")


def test_compute_dtype() -> None:
    h100, b200, a100 = read_gpu("H100"), read_gpu("B200"), read_gpu("A100")
    assert h100.compute_dtype("fp8") == "fp8" and h100.compute_dtype("bf16") == "bf16"
    # MXFP4 weights: FP4 tensor cores on Blackwell; dequantized to bf16 on Hopper
    assert b200.compute_dtype("mxfp4") == "fp4" and h100.compute_dtype("mxfp4") == "bf16"
    assert a100.compute_dtype("fp8") == "bf16"


# ---- lookup ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("h100-sxm", "H100-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("H100", "H100-SXM"),
        ("h100-sxm5", "H100-SXM"),
        ("a100", "A100-80GB"),
        ("dgx-b300", "B300"),
        ("gb200-nvl72", "GB200"),
        (" h200 ", "H200"),
    ],
)
def test_lookup_by_name_and_alias(given: str, name: str) -> None:
    assert read_gpu(given).name == name


def test_unknown_name_lists_the_shipped_cards() -> None:
    with pytest.raises(InputError) as e:
        read_gpu("H900")
    msg = str(e.value)
    assert "unknown GPU 'H900'" in msg
    for name in DATASHEET:
        assert name in msg


def test_user_card_by_path(tmp_path: Path) -> None:
    shutil.copy(GPU_DIR / "h100-sxm.yaml", tmp_path / "mine.yaml")
    by_path = read_gpu(str(tmp_path / "mine.yaml"))
    by_base = read_gpu("mine.yaml", base_dir=tmp_path)
    shipped = read_gpu("H100-SXM")
    for c in (by_path, by_base):
        assert c.flops == shipped.flops and c.hbm == shipped.hbm
        assert c.host_link_per_direction == shipped.host_link_per_direction


MINIMAL = """\
name: My-GPU
generation: hopper
flops:
  bf16: 1 PFLOP/s
hbm: 96 GB
hbm_bandwidth: 4 TB/s
host_link: PCIe Gen5 x16
host_link_per_direction: 64 GB/s
nvlink_per_gpu: 0 GB/s
nic_per_gpu: 400 Gb/s
"""


def test_minimal_user_card(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(MINIMAL)
    c = read_gpu(str(tmp_path / "g.yaml"))
    # 1 PFLOP/s = 1e15; 96 GB = 96e9 B; 4 TB/s = 4e12 B/s; 400 Gb/s = 400e9 / 8 = 50e9 B/s
    assert c.flops == {"bf16": 1e15} and c.hbm == 96e9 and c.hbm_bandwidth == 4e12
    assert c.nvlink_per_gpu == 0.0 and c.nic_per_gpu == 50e9 and c.sources == {}


@pytest.mark.parametrize(
    ("edit", "field", "line", "reason"),
    [
        (("hbm: 96 GB\n", ""), "hbm", 1, "missing"),  # a missing field: the card's line 1
        (("4 TB/s", "-4 TB/s"), "hbm_bandwidth", 6, "must be positive"),
        (
            ("host_link_per_direction: 64 GB/s", "host_link_per_direction: 64"),
            "host_link_per_direction",
            8,
            "missing unit",
        ),
        (
            ("  bf16: 1 PFLOP/s", "  bf16: 1 PFLOP/s\n  fp16: 1 PFLOP/s"),
            "flops.fp16",
            5,
            "unknown dtype",
        ),
        (("  bf16: 1 PFLOP/s", "  bf16: 1000"), "flops.bf16", 4, "missing unit"),
        (("generation: hopper", "generation: volta"), "generation", 2, "unknown generation"),
        (("hbm: 96 GB", "hbm: 96 GB\nhmb: 1 GB"), "hmb", 6, "did you mean 'hbm'"),
        (("  bf16: 1 PFLOP/s", "  fp8: 1 PFLOP/s"), "flops", 3, "bf16"),
        (("nic_per_gpu: 400 Gb/s", "nic_per_gpu: -1 Gb/s"), "nic_per_gpu", 10, ">= 0"),
    ],
)
def test_bad_user_card_names_file_line_and_field(
    tmp_path: Path, edit: tuple[str, str], field: str, line: int, reason: str
) -> None:
    path = tmp_path / "bad.yaml"
    assert edit[0] in MINIMAL
    path.write_text(MINIMAL.replace(edit[0], edit[1], 1))
    with pytest.raises(InputError) as e:
        read_gpu(str(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: {field}: "), msg
    assert reason in msg, msg
    assert "\n" not in msg


def test_non_yaml_and_non_mapping_cards(tmp_path: Path) -> None:
    bad = tmp_path / "card.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="YAML syntax error"):
        read_gpu(str(bad))
    bad.write_bytes(b"\x00\x01binary")
    with pytest.raises(InputError, match=str(bad)):
        read_gpu(str(bad))
    bad.write_text("- a list\n- not a card\n")
    with pytest.raises(InputError, match="expected a GPU card"):
        read_gpu(str(bad))
    with pytest.raises(InputError, match="not found"):
        read_gpu(str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="is a folder"):
        read_gpu(str(tmp_path) + "/")


# ---- efficiency -------------------------------------------------------------------------------


def test_efficiency_values_in_range_with_sources() -> None:
    """Every curve parameter of every generation lies in its documented range, has a mark
    and a source; fractions are in (0, 1]."""
    assert generations() == list(GENERATIONS)
    for gen in generations():
        h = host_link_frac(gen)
        assert 0 < h.lo <= h.value <= h.hi <= 1 and h.mark in ("M", "L") and h.source
        for op in OPS:
            for dtype in eff_dtypes(gen, op):
                c = curve(gen, op, dtype)
                assert set(c) == set(PARAMS), (gen, op, dtype)
                for p, v in c.items():
                    assert v.lo <= v.value <= v.hi, (gen, op, dtype, p)
                    assert v.mark in ("H", "M", "L") and v.source, (gen, op, dtype, p)
                    if p != "half":
                        assert v.lo > 0 and v.hi <= 1, (gen, op, dtype, p)
    factor, width = narrow()
    assert 0 < factor.lo <= factor.value <= factor.hi <= 1 and width == 2112


def test_every_card_dtype_has_a_dense_curve_and_attention_in_bf16() -> None:
    for g in list_gpus():
        card = read_gpu(g["name"])
        for dtype in card.flops:
            assert set(curve(card.generation, "dense", dtype)) == set(PARAMS)
        assert set(curve(card.generation, "attention", "bf16")) == set(PARAMS)


def test_efficiency_table_is_small() -> None:
    # fp4 only from Blackwell on
    assert eff_dtypes("ampere") == ["bf16"]
    assert eff_dtypes("hopper") == ["bf16", "fp8"]
    assert eff_dtypes("blackwell") == eff_dtypes("blackwell-ultra") == ["bf16", "fp8", "fp4"]
    assert eff_dtypes("hopper", "experts") == ["fp8", "bf16", "int4"]
    assert eff_dtypes("hopper", "attention") == ["bf16"]


def test_a_curve_by_hand() -> None:
    """Hopper's dense BF16 GEMMs (efficiency.yaml: e_max 0.71, half 43, our fit to
    Vidur's H100 tables): at 43 tokens half of 0.71, at 4,096 tokens 0.71 x 4096 / 4139."""
    from kvsim.physics.ops import efficiency

    c = curve("hopper", "dense", "bf16")
    e_max, half = c["e_max"].value, c["half"].value
    assert (e_max, half) == (0.71, 43)
    assert efficiency(43, e_max, half) == pytest.approx(0.355)
    assert efficiency(4096, e_max, half) == pytest.approx(0.71 * 4096 / 4139)
    assert efficiency(0, e_max, half) == 0.0


@pytest.mark.parametrize(
    ("gen", "op", "dtype", "match"),
    [
        ("volta", "dense", "bf16", "known: ampere, hopper, blackwell, blackwell-ultra"),
        ("hopper", "dense", "fp4", "hopper in fp4; it has bf16, fp8"),
        ("ampere", "dense", "fp8", "ampere in fp8; it has bf16"),
        ("blackwell", "experts", "int8", "blackwell in int8"),
    ],
)
def test_unknown_generation_or_dtype(gen: str, op: str, dtype: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        curve(gen, op, dtype)


def test_efficiency_lookup_is_case_insensitive() -> None:
    assert curve("Hopper", "dense", "fp8") == curve("hopper", "dense", "fp8")


# ---- fuzz: any value in any field of a user's card is read or refused with one line --------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        ["-1 GB", "0 GB/s", "1e999 TB/s", "5 Tflop/s", "3 TFLOPS", "nan GB", "12", "fp8", "[]"]
    ),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.sampled_from(["bf16", "fp8", "fp4", "fp16", "x"]), st.text(max_size=12)),
)
_CARD_FIELDS = [*yaml.safe_load(MINIMAL), "flops_sparse", "aliases", "sources", "description"]


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(field=st.sampled_from(_CARD_FIELDS), value=_JUNK, drop=st.booleans())
def test_fuzzed_user_cards_read_or_refused_cleanly(
    tmp_path: Path, field: str, value: object, drop: bool
) -> None:
    data = yaml.safe_load(MINIMAL)
    if drop:
        data.pop(field, None)
    else:
        data[field] = value
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        card = read_gpu(str(path))
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg and str(path) in msg
        event("refused")
    else:
        assert card.flops["bf16"] > 0 and card.hbm > 0 and card.hbm_bandwidth > 0
        assert all(math.isfinite(v) for v in (*card.flops.values(), card.hbm))
        event("read")
