import pytest


@pytest.fixture(autouse=True)
def _no_extension_left():
    """A lab test that plugged an extension in (helpers.run.extensions.use, as lab/benchmark_memory.py does) leaves the
    next test the course's own run."""
    yield
    from helpers.run import extensions

    extensions.clear()
