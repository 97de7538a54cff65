"""Translations of the model into the generated code's languages, one module per language."""
