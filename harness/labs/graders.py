"""Every lab's grader, registered in :data:`harness.labs.grading.LABS` by importing this."""

from harness.labs import advanced, basics  # noqa: F401  (each module registers its labs)
