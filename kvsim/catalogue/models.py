"""Model cards by name: the shipped ones (``kvsim/catalogue/models/NAME.json``, a subset
of each model's real Hugging Face config plus a ``"kvsim"`` key with the card's sources)
and a user's own ``config.json``, read into a :class:`~kvsim.catalogue.modelcard.ModelCard`
(:mod:`kvsim.catalogue.hfconfig` says which keys are read and how)."""

from __future__ import annotations

from pathlib import Path

from kvsim.catalogue.configjson import load_config_json
from kvsim.catalogue.hfconfig import card_from_config
from kvsim.catalogue.modelcard import ModelCard
from kvsim.errors import InputError, shown

MODEL_DIR = Path(__file__).parent / "models"


def _shipped() -> dict[str, Path]:
    return {p.stem.lower(): p for p in sorted(MODEL_DIR.glob("*.json"))}


def is_model_path(name_or_path: str) -> bool:
    """A card argument is a file when it ends in .json or contains a path separator."""
    return name_or_path.lower().endswith(".json") or "/" in name_or_path or "\\" in name_or_path


def read_model(name_or_path: str, base_dir: Path | None = None) -> ModelCard:
    """A shipped card by name (case-insensitive) or a config.json file (a path ending in
    .json or containing /, relative to ``base_dir``). InputError names the file and key."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(
            f"model: expected a card name or a config.json path, got {shown(name_or_path)}"
        )
    if is_model_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        where = str(path)
        doc = load_config_json(path, where)
        stem = path.parent.name if path.name.lower() == "config.json" else path.stem
        return card_from_config(doc, where=where, name=stem or "model")
    shipped = _shipped()
    card_path = shipped.get(name_or_path.strip().lower())
    if card_path is None:
        raise InputError(
            f"model: unknown card {shown(name_or_path)}; shipped: {', '.join(shipped)} "
            "(or give a config.json path)"
        )
    doc = load_config_json(card_path, str(card_path))
    return card_from_config(doc, where=str(card_path), name=card_path.stem)


def list_models() -> list[dict[str, str]]:
    """Name, description and source of every shipped card, sorted by name."""
    out = []
    for name in sorted(_shipped()):
        card = read_model(name)
        out.append({"name": card.name, "description": card.description, "source": card.source})
    return out


__all__ = ["MODEL_DIR", "is_model_path", "list_models", "read_model"]
