"""Fixtures the unit tests share."""

import pytest

from topologies.impair import loss
from topologies.impair.loss import LossModelError


@pytest.fixture
def helper():
    """The Gilbert-Elliott loader's path; the test is skipped when it is not built."""
    try:
        return loss.ge_binary()
    except LossModelError:
        pytest.skip("ge-loss is not built (./setup.sh)")
