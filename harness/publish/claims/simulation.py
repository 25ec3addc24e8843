"""Findings: simulation (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
