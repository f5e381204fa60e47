"""Helpers shared by the tests (fixtures live in conftest.py files); no test module imports another."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
