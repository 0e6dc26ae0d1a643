"""The capstone check on scripts written as students would (tests/capstone_scripts/, each file's docstring says what
it does), run for real: TRL 1.15, 2 CPU steps each, the adapter measured by the checker. A module of its own so that
pytest-xdist's loadfile puts it beside test_capstone.py, not after it in the same worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import capstone

ROOT = Path(__file__).resolve().parents[1]

STUDENT_SCRIPTS = ROOT / "tests" / "capstone_scripts"
# Scripts written as students would (each file's docstring says what it does), and the verdict each must get: passed,
# or refused with the phrases that name the mistake and the fix.
VERDICTS = {
    "subclass_in_main.py": (True, ["correctness, formatting", "mean reward on the 2 steps that sampled",
                                   "of the advantage moved its way"]),
    "forged_record.py": (False, ["the saved adapter does not move the run's completions the way their advantages say",
                                 "the most the same weights shuffled get", "Fix: save the model GRPOTrainer trained"]),
    "random_reward.py": (False, ["your reward tags gave the same completions different scores on two calls",
                                 "Fix: score each completion from its text"]),
    "heldout_questions.py": (False, ["500 of the 500 questions your script trains on are from the held-out split",
                                     "Fix: train on the train split"]),
    "pipeline_runpy.py": (False, ["while running, pipeline_runpy.py imports helpers.train", "Fix: build GRPOConfig"]),
    "pipeline_subprocess.py": (False, ["while running, pipeline_subprocess.py starts another Python", "no subprocess"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_student_scripts_get_the_right_verdict(name):
    """TRL 1.15 for real, 2 CPU steps each (about 50 s alone for the one that passes; the refusals stop before their
    first step): dr_grpo with gradient accumulation (so steps_per_generation 2), beta=0.04 (TRL's frozen `ref` adapter
    beside the trained one), a subclassed trainer and code inside main() pass in one script (the default loss with
    num_iterations=2 is the reference solution, checked for real by test_notebooks.py's 09); a forged record, a reward
    blind to the completion, held-out questions and the pipeline reached through runpy or a subprocess are refused,
    each with its fix."""
    passed, phrases = VERDICTS[name]
    result = capstone.check(STUDENT_SCRIPTS / name)
    assert result.passed is passed, repr(result)
    for phrase in phrases:
        assert phrase in result.message, (phrase, result.message)
    if passed:
        assert result.details["agreement"] >= capstone.AGREEMENT
        assert result.details["direction"] > capstone.BEYOND * max(result.details["shuffled"])
