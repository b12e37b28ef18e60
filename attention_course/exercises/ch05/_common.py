"""Helpers shared by the exercises of chapter 5 (one copy each)."""
from __future__ import annotations
