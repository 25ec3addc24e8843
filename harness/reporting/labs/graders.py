"""Every lab's grader, registered in :data:`~harness.reporting.labs.grading.LABS` on import."""

from harness.reporting.labs import advanced, basics  # noqa: F401  (each module registers its labs)
