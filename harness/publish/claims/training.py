"""Findings: training (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
