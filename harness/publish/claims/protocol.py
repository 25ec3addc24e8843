"""Findings: protocol (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
