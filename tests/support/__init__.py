"""Test scaffolding: synthetic records, matrices, the headless-browser checker (not part of the package)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository
