"""Findings: trust (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
