"""Translations of the model into the languages of the generated code, one module per language."""
