"""Tests of bench/marian: the imported Marian model against CTranslate2 at its quick shape."""
