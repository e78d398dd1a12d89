"""Model and GPU catalogue: model cards (Hugging Face config.json), GPU cards, composition."""
