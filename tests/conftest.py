import os

# Same as helpers/__init__.py, for test modules that import torch before helpers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


import pytest  # noqa: E402

# The modules that take the most time (real GRPO steps, whole notebooks), longest first: pytest-xdist hands them out
# first (pyproject's --no-loadscope-reorder keeps this order), so the short modules fill in at the end and the two
# workers finish together. Per-module times, both workers summed: lab/docs/performance.md (2026-11-29). Order only.
LONGEST_FIRST = ("tests/test_notebooks.py", "tests/test_student_notebooks.py", "tests/test_capstone_scripts.py",
                 "tests/test_grpo_step.py", "tests/test_resume.py", "tests/test_browser_widgets.py",
                 "tests/test_sharing.py", "tests/test_train.py", "tests/test_cpu_decode.py",
                 "tests/test_training_health.py", "lab/tests/test_scale_out.py", "tests/test_capstone.py",
                 "lab/tests/test_benchmark_memory.py", "tests/test_reward_specs.py", "tests/test_cpu_generation.py")


def pytest_collection_modifyitems(config, items):
    """The long modules first, each module's tests in their own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected


@pytest.fixture(autouse=True)
def _no_extension_left():
    """A test that plugged an extension in (helpers.run.extensions.use) leaves the next test the course's own run."""
    yield
    from helpers.run import extensions

    extensions.clear()


@pytest.fixture(autouse=True)
def _speedups_back_on():
    """A test whose run turned CPU speed-ups off (pipeline.start configures them per process) leaves them on again."""
    yield
    from helpers import speedups

    speedups.configure(None)


@pytest.fixture
def decode_loop_rows(monkeypatch):
    """The rows helpers.cpu_decode's loop decoded at each of its steps, recorded as the test runs (empty: the loop
    did not run; shrinking: finished rows left)."""
    from helpers import cpu_decode

    rows, real_step = [], cpu_decode.LlamaLayers.step
    monkeypatch.setattr(cpu_decode.LlamaLayers, "step",
                        lambda self, tokens, *a: rows.append(len(tokens)) or real_step(self, tokens, *a))
    return rows


@pytest.fixture
def speedups_all_on(monkeypatch):
    """Every speed-up on for this test, whatever $GRPO_KIT_SPEEDUPS_OFF says (test_speedups, test_cpu_generation
    compare each one on and off); the autouse fixture above turns them back on after."""
    from helpers import speedups

    monkeypatch.delenv(speedups.ENV, raising=False)
    speedups.configure(None)
