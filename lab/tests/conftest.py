import pytest

# The course's fixtures (tests/conftest.py) serve the lab's tests too: the speed-ups put back on after a run, the
# decoding loop's rows, every speed-up on.
from tests.conftest import _speedups_back_on, decode_loop_rows, speedups_all_on  # noqa: F401


@pytest.fixture(autouse=True)
def _no_extension_left():
    """A lab test that plugged an extension in (helpers.run.extensions.use, as lab/benchmark_memory.py does) leaves the
    next test the course's own run."""
    yield
    from helpers.run import extensions

    extensions.clear()
