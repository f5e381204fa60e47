"""Tests of bench/soak: the soak driver, the fuzz command and the clean-message check they share."""
