"""Tests of bench/families: each imported family against CTranslate2 at its quick shape."""
