"""Labs that grade themselves: ``invoke lab-check N --sweep DIR [--answers FILE]``.

:mod:`harness.reporting.labs.grading` holds the grade (verdicts, the reading of a student's folder,
the answers file) and the checks every lab shares; :mod:`harness.reporting.labs.basics` grades labs
1-4 and :mod:`harness.reporting.labs.advanced` labs 5-9, each statement of a page's "What you
should observe" on the student's own rows. Nothing here measures: the graders read the tables a
sweep wrote.
"""
