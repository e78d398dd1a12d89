"""Docs that match the code."""

from kvsim.config.reference import render

from conftest import ROOT


def test_scenario_reference_is_up_to_date():
    doc = (ROOT / "docs" / "scenario-reference.md").read_text(encoding="utf-8")
    assert doc == render(), "run: python -m kvsim.config.reference > docs/scenario-reference.md"


def test_readme_commands_name_real_files():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("scenarios/quickstart.yaml", ".[test]", "python -m pytest"):
        assert name in readme
    assert (ROOT / "scenarios" / "quickstart.yaml").exists()


def test_readme_outputs_name_every_summary_key():
    """Users learn the summary's keys from README.md's Outputs: each one is there."""
    from kvsim.results.metrics import METRICS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outputs = readme.split("## Outputs", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in METRICS if f"`{key}`" not in outputs]
    assert not missing, f"README.md, Outputs: add {missing}"
