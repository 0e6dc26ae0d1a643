"""A reward a student might write (used by test_train to train with a reward from outside helpers.rewards)."""

from helpers.rewards import completion_text


def brevity_reward(prompts=None, completions=None, **kwargs):
    """0.5 for a completion under 40 words, else 0: TRL logs it as rewards/brevity_reward/mean."""
    return [0.5 if len(completion_text(c).split()) < 40 else 0.0 for c in completions]
