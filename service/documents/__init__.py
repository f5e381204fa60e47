"""Whole documents for translation: their sentences and the pieces of a sentence too long for a model."""
