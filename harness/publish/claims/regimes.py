"""Findings: regimes (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
