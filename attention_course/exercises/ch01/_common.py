"""Helpers shared by the exercises of chapter 1 (one copy each)."""
from __future__ import annotations
