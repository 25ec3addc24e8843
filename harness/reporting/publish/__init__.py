"""Everything the project publishes, regenerated from the committed tables by code.

No measured number is typed by hand: every results folder's ``report.md`` and figures, every
block between ``<!-- generated:NAME -->`` markers in README.md and docs/*.md, and the whole of
docs/findings.md are rendered here from the folders' tables. ``invoke publish`` rewrites them;
``invoke publish --check`` (and ``tests/unit/test_publish.py``) fails on any difference, so a
hand-edited number, a table that moved or code that changed the numbers' freshness shows up.

- :mod:`harness.reporting.publish.context`: the published results folders, loaded once, with their
  provenance and freshness;
- :mod:`harness.reporting.publish.blocks`: the markers and how a block is filled;
- :mod:`harness.reporting.publish.claims`: the registry of generated blocks (name -> function of the
  context) and the findings page's sections, organised by question;
- :mod:`harness.reporting.publish.build`: regenerate (or check) every report, figure, block and
  page.
"""
