"""Helpers shared by the exercises of chapter 3 (one copy each)."""
from __future__ import annotations
