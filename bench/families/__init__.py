"""The per-family benchmark: a random-weight model of a real checkpoint's shape per imported family, ours
(fp32, int8) against CTranslate2 (float32, int8); bench/families/compare.py says what it measures."""
