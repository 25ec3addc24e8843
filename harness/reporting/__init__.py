"""Reporting: everything that reads the committed tables and says what they show; nothing here
runs an experiment or changes a measured number (so none of it is in a run's code fingerprint).

- :mod:`.tables`: a sweep folder's tables loaded (:class:`~.tables.Sweep`), its cells and schemes;
- :mod:`.stats`: intervals of the median with their real coverage, paired comparisons, verdicts
  and their tally;
- :mod:`.figures` and :mod:`.report`: a folder's figures and ``report.md``;
- :mod:`.sections`: the report's optional sections (faults, Byzantine workers, compression), one
  registry;
- :mod:`.publish`: everything published (reports, figures, the generated parts of README.md and
  docs/), regenerated from the tables or checked against them.
"""
