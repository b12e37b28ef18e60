"""Helpers shared by the exercises of chapter 9 (one copy each)."""
from __future__ import annotations


NEG_INF = float("-inf")
