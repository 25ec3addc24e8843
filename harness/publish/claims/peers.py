"""Findings: peers (to be written)."""

BLOCKS: dict = {}
SECTIONS: list = []
