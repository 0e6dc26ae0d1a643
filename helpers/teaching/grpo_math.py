"""GRPO in plain numbers: group-relative advantages, the first-step loss, and a slider widget to play with them.

    from helpers.teaching.grpo_math import group_advantages
    group_advantages([4.0, 0.0, 2.5, 0.0])           # one group of 4 completions of the same prompt
    # -> [1.2032, -0.8232, 0.4433, -0.8232]  (reward minus the group mean, divided by the group's std + 1e-4)

This is the computation in TRL 1.15's GRPOTrainer._generate_and_score_completions (multi_objective_aggregation
"sum_then_normalize", the default), written out without torch so it can be read and checked by hand:

    rewards    = sum over reward functions of weight x reward      (NaN when every function returned None)
    mean_g     = nanmean of the rewards of the group (the num_generations completions of one prompt)
    std_g      = nanstd of the group: the SAMPLE standard deviation (Bessel's n-1), trl.trainer.utils.nanstd
    advantage  = (reward - mean_g) / (std_g + 1e-4)     scale_rewards="group" (TRL's default)
                 (reward - mean_g) / (std_batch + 1e-4) scale_rewards="batch" (std over the whole batch)
                 reward - mean_g                        scale_rewards="none"
    NaN advantages (unscorable completions) become 0.

Every token of a completion gets its completion's advantage: a positive advantage pushes the probability of
those tokens up, a negative one pushes it down, zero leaves them alone. A group where every completion scored the
same has std 0 and all advantages 0: no learning signal (the dashboard's "zero-spread" groups).
tests/test_grpo_math.py checks these numbers against hand-computed ones and against TRL's own nanstd.
"""

from __future__ import annotations

import html
import math

from helpers.rewards import score_completion

EPS = 1e-4  # TRL adds this to the std before dividing


def _nanmean(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else float("nan")


def _nanstd(values: list[float]) -> float:
    """Sample standard deviation ignoring NaNs (Bessel's n-1), as trl.trainer.utils.nanstd; NaN for < 2 values."""
    vals = [v for v in values if not math.isnan(v)]
    if len(vals) < 2:
        return float("nan")
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def _floats(rewards) -> list[float]:
    return [float("nan") if r is None else float(r) for r in rewards]


def group_advantages(rewards, num_generations: int | None = None, scale: str = "group", eps: float = EPS) -> list[float]:
    """TRL's advantages for a flat list of rewards, grouped num_generations at a time (default: one group).

    scale: "group" (TRL's default scale_rewards), "batch" or "none". None or NaN rewards are unscorable: they are
    left out of the group mean and std and get advantage 0.
    """
    r = _floats(rewards)
    n = len(r) if num_generations is None else int(num_generations)
    if n < 1 or len(r) % n:
        raise ValueError(f"{len(r)} rewards cannot be split into groups of num_generations={n}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale={scale!r}: use 'group', 'batch' or 'none' (TRL's scale_rewards)")
    groups = [r[i : i + n] for i in range(0, len(r), n)]
    means = [_nanmean(g) for g in groups for _ in g]
    if scale == "batch":
        s = _nanstd(r) if len(r) > 1 else 0.0
        stds = [s] * len(r)
    elif n > 1:
        stds = [_nanstd(g) for g in groups for _ in g]
    else:
        stds = [0.0] * len(r)
    out = []
    for reward, mean, std in zip(r, means, stds):
        a = reward - mean
        if scale != "none":
            a = a / (std + eps)
        out.append(0.0 if math.isnan(a) else a)
    return out


def group_stats(rewards) -> dict:
    """Mean, sample std and whether the group carries any signal (std > 0), for one group."""
    r = _floats(rewards)
    std = _nanstd(r)
    return {"mean": _nanmean(r), "std": 0.0 if math.isnan(std) else std,
            "signal": not (math.isnan(std) or math.isclose(std, 0.0, abs_tol=1e-12))}


def first_step_loss(advantages, lengths, loss_type: str = "dapo") -> float:
    """The policy-gradient loss VALUE on the first optimisation of a freshly generated batch (beta = 0).

    Then the new and old log-probabilities are equal, the importance ratio is exactly 1, and the per-token loss is
    -advantage. TRL's aggregations: "dapo" (TRL >= 0.22 default) and "bnpo" sum over all tokens and divide by the
    number of tokens -> -sum(A_i x len_i) / sum(len_i); "grpo" averages per completion then over completions ->
    -mean(A_i); "dr_grpo" divides by completions x max_completion_length (here: the longest length).
    Because advantages are zero-mean within each group, the "grpo" value is 0 and the "dapo" value is 0 whenever
    the completions of a group are equally long (otherwise small: how advantage and length go together). The
    GRADIENT is not zero: it is -sum(A_i x grad log p(token)).
    """
    a, lens = [float(x) for x in advantages], [int(x) for x in lengths]
    if len(a) != len(lens) or not a:
        raise ValueError("one length per advantage, at least one")
    if loss_type in ("dapo", "bnpo"):
        total = sum(lens)
        return -sum(x * n for x, n in zip(a, lens)) / total if total else 0.0
    if loss_type == "grpo":
        return -sum(a) / len(a)
    if loss_type == "dr_grpo":
        return -sum(x * n for x, n in zip(a, lens)) / (len(a) * max(lens))
    raise ValueError(f"loss_type={loss_type!r}: this helper knows 'dapo', 'bnpo', 'grpo' and 'dr_grpo'")


def direction(advantage: float, tol: float = 1e-6) -> str:
    if advantage > tol:
        return "pushed UP"
    if advantage < -tol:
        return "pushed down"
    return "unchanged"


def explain_group(completions: list[str], rewards, scale: str = "group") -> list[dict]:
    """One row per completion: its reward, advantage and what happens to its tokens."""
    adv = group_advantages(rewards, scale=scale)
    return [{"completion": c, "reward": float(r), "advantage": a, "tokens": direction(a)}
            for c, r, a in zip(completions, _floats(rewards), adv)]


def format_table(rows: list[dict], width: int = 48) -> str:
    lines = [f"{'completion':<{width}} {'reward':>7} {'advantage':>10}  tokens"]
    for row in rows:
        text = row["completion"].replace("\n", " ")
        text = text if len(text) <= width else text[: width - 3] + "..."
        lines.append(f"{text:<{width}} {row['reward']:>7.2f} {row['advantage']:>+10.3f}  {row['tokens']}")
    return "\n".join(lines)


# One group for the worked example in 04_rewards: four completions of "3 bags with 4 apples each" (gold 12).
EXAMPLE_GOLD = "12"
EXAMPLE_COMPLETIONS = {
    "right, formatted": "<reasoning>3 * 4 = 12</reasoning><answer>12</answer>",
    "right, no tags": "3 * 4 = 12. The answer is 12.",
    "wrong, formatted": "<reasoning>3 + 4 = 7</reasoning><answer>7</answer>",
    "wrong, no tags": "I think it is 7.",
}


def example_group() -> dict[str, float]:
    """{'<completion> (<label>)': total reward} for EXAMPLE_COMPLETIONS, scored by the kit's five rewards (never
    typed by hand: the one-line layouts miss the strict format, and the table must say so)."""
    return {f"{text} ({label})": sum(score_completion(text, EXAMPLE_GOLD).values())
            for label, text in EXAMPLE_COMPLETIONS.items()}


EXAMPLE_GROUP = example_group()


class AdvantageWidget:
    """One slider per completion's reward; the advantages table below updates as you move them.

    Without ipywidgets or a live kernel (CI, a saved notebook) it still works: `set_rewards([...])` recomputes,
    `.rows` / `.text` hold the table, and displaying it shows the table as text.
    """

    def __init__(self, group: dict | None = None, scale: str = "group", max_reward: float = 4.0):
        group = dict(EXAMPLE_GROUP if group is None else group)
        self.labels, self.rewards, self.scale = list(group), [float(v) for v in group.values()], scale
        self.rows: list[dict] = []
        self.sliders, self.output, self.box = [], None, None
        self._moving_sliders = False
        try:
            import ipywidgets as widgets
        except ImportError:  # degrade: a static table
            widgets = None
        if widgets is not None:
            # An HTML widget, not widgets.Output: capturing prints into an Output widget from inside the cell that
            # creates it hung a headless kernel (papermill under pytest); setting .value is a plain comm update.
            self.output = widgets.HTML()
            for label, value in zip(self.labels, self.rewards):
                s = widgets.FloatSlider(value=value, min=0.0, max=max_reward, step=0.25, description="reward",
                                        continuous_update=False, layout=widgets.Layout(width="420px"))
                s.observe(self._on_change, names="value")
                self.sliders.append(s)
            rows = [widgets.HBox([s, widgets.Label(label[:60])]) for s, label in zip(self.sliders, self.labels)]
            self.box = widgets.VBox([*rows, self.output])
        self._recompute()

    def _on_change(self, _change=None):
        if not self._moving_sliders:
            self.set_rewards([s.value for s in self.sliders])

    def set_rewards(self, rewards) -> list[dict]:
        """New rewards from code: the table is recomputed and the sliders move to match it."""
        self.rewards = [float(r) for r in rewards]
        self._moving_sliders = True  # one recompute, not one per slider moved
        try:
            for slider, value in zip(self.sliders, self.rewards):
                slider.max, slider.min = max(slider.max, value), min(slider.min, value)  # never clamp a reward
                slider.value = value
        finally:
            self._moving_sliders = False
        self._recompute()
        return self.rows

    @property
    def text(self) -> str:
        stats = group_stats(self.rewards)
        note = ("" if stats["signal"] else
                "\nEvery completion scored the same: std 0, all advantages 0 - this group teaches nothing.")
        return (format_table(self.rows) + f"\ngroup mean {stats['mean']:.3f}, std {stats['std']:.3f} "
                f"(advantages sum to {sum(r['advantage'] for r in self.rows):+.3f})" + note)

    def _recompute(self):
        self.rows = explain_group(self.labels, self.rewards, self.scale)
        if self.output is not None:
            self.output.value = f"<pre>{html.escape(self.text)}</pre>"

    def _ipython_display_(self):
        from IPython.display import display

        if self.box is not None:
            display(self.box)
        else:
            print(self.text)

    def __repr__(self) -> str:
        return self.text


def advantage_widget(group: dict | None = None, scale: str = "group") -> AdvantageWidget:
    """The 04_rewards playground for advantages (see AdvantageWidget)."""
    return AdvantageWidget(group, scale)


# ------------------------------------------------------------------------------------------- the policy update

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def policy_loss(per_token_logps, old_per_token_logps, advantages, mask, loss_type: str = "dapo",
                epsilon: float = 0.2, epsilon_high: float | None = None, beta: float = 0.0, ref_per_token_logps=None,
                max_completion_length: int | None = None, bias_correction_kl: bool = True) -> dict:
    """TRL 1.15's GRPO loss for one generation batch (token-level ratios, one process, no vLLM correction), step by
    step, as torch tensors of shape (completions, tokens):

        ratio     = exp(logp - logp_old)                       how much likelier each sampled token became
        clipped   = clamp(ratio, 1 - epsilon, 1 + epsilon_high)
        per token = -min(ratio * A, clipped * A) + beta * KL   the clipped surrogate (PPO's), A = the advantage
        KL        = exp(ref - logp) - (ref - logp) - 1          per-token KL estimate to the reference model (k3),
                    times ratio when bias_correction_kl (TRL's default use_bias_correction_kl=True: 1 in value
                    on-policy, but it changes the gradient)
        loss      = the per-token losses averaged as loss_type says:
                    grpo: per completion, then over completions; bnpo / dapo: over all tokens of the batch;
                    dr_grpo: summed, divided by completions x max_completion_length (no length bias)

    tests/test_grpo_math.py checks every loss type against GRPOTrainer._compute_loss itself.
    """
    import torch

    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type={loss_type!r}: this lesson covers {LOSS_TYPES}")
    logps, old, mask = (torch.as_tensor(x, dtype=torch.float32) for x in (per_token_logps, old_per_token_logps, mask))
    adv = torch.as_tensor(advantages, dtype=torch.float32)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    kl = None
    if beta != 0.0:
        if ref_per_token_logps is None:
            raise ValueError("beta > 0 needs ref_per_token_logps (the reference model's log-probabilities)")
        ref = torch.as_tensor(ref_per_token_logps, dtype=torch.float32)
        kl = torch.exp(ref - logps) - (ref - logps) - 1
        if bias_correction_kl:
            kl = kl * ratio
        per_token = per_token + beta * kl
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type in ("bnpo", "dapo"):
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    else:
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' divides by max_completion_length: pass it")
        loss = (per_token * mask).sum() / (per_token.size(0) * max_completion_length)
    return {"ratio": ratio, "clipped_ratio": clipped, "per_token_kl": kl, "per_token_loss": per_token, "loss": loss,
            "clipped": ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + high) & (adv > 0))}


def completion_logps(model, batch, temperature: float = 1.0):
    """log p(token | everything before it) for every completion token, as TRL computes it (logits / temperature).

    The logits of the last completion-length + 1 positions only (TRL's logits_to_keep): the prompt's positions
    predict nothing that is scored, and the output projection over the whole vocabulary is the costly part.

    A group (one prompt repeated, as sample(step) returns it) of a transformers model runs its prompt once, its
    keys/values shared by the completions: helpers.cpu_compat.shared_prompt_logps, the kit's GRPO runs' loss on the
    CPU (speed-up shared_prompt_loss). The same log-probabilities within float rounding (tests/test_grpo_math.py);
    0 on the padding after a completion's end, which the mask leaves out anyway."""
    import torch

    from helpers import speedups
    from helpers.cpu_compat import shared_prompt_logps

    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    if speedups.enabled("shared_prompt_loss"):
        shared = shared_prompt_logps(model, input_ids, attention, keep, temperature)
        if shared is not None:
            return shared[0]
    logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep + 1).logits
    logits = logits[:, -(keep + 1) : -1] / temperature  # a model without logits_to_keep returned every position
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


# ------------------------------------------------------------------------------ TRL's own loss, for lesson 08's check
# GRPOTrainer._compute_loss starts with the model's forward pass; trl_loss replaces that pass with the log-probabilities
# given, and everything after it is TRL's code, run as is (the ratio, the clipping, the loss type's averaging), with
# GRPOConfig's defaults read from the dataclass, so a TRL that changes a default changes the truth with it. One
# process, no vLLM, no accumulation: one generation batch. Lesson 08's policy_loss exercise checks the student's loss against it.


def trl_default(name: str):
    """The default of one GRPOConfig field (read from the dataclass: building a GRPOConfig sets up accelerate)."""
    from trl import GRPOConfig

    return GRPOConfig.__dataclass_fields__[name].default


def trl_loss(logps, old_logps, advantages, mask, epsilon: float | None = None, loss_type: str | None = None,
             beta: float = 0.0, ref_logps=None, max_completion_length: int | None = None):
    """GRPOTrainer._compute_loss on these per-token log-probabilities (completions x tokens), with the old policy's
    log-probabilities, one advantage per completion and the completion mask. epsilon and loss_type default to
    GRPOConfig's; beta > 0 adds the KL term against ref_logps; max_completion_length (dr_grpo's constant) defaults to
    the tokens given. Returns TRL's loss tensor (with a gradient back to logps when logps has one). The call on TRL's
    private method is helpers.run.trl_patches.trl_compute_loss."""
    from helpers.run.trl_patches import LOSS_CONFIG_FIELDS, trl_compute_loss

    config = {name: trl_default(name) for name in LOSS_CONFIG_FIELDS}
    config["beta"] = beta
    if epsilon is not None:
        config["epsilon"] = epsilon
    if loss_type is not None:
        config["loss_type"] = loss_type
    return trl_compute_loss(logps, old_logps, advantages, mask, config, ref_logps, max_completion_length)


# ------------------------------------------------------------------- lesson 08's loop: its settings, its measured seeds
# One home for the loop's settings: the lesson's grpo_train runs with them, its check judges the rise against an lr-0
# control under them, 05's rerun exercise (rerun_prediction) reruns them with one setting changed, and
# scripts/lesson08_trl_curve.py stored the kit's own loop (nb08.loop_run) and its lr-0 control (control_run) on
# several seeds with them. The rewards are the kit's five (04's), the correctness one being the student's
# my_correctness_reward in the lesson: with correctness alone the small model's groups have no spread (0 right answers
# in 48 sampled completions at the start, 2026-11-29), the format rewards give the signal.

LOOP = {"num_generations": 8, "max_completion_length": 64, "temperature": 1.0, "learning_rate": 5e-4,
        "max_grad_norm": 1.0, "steps": 12, "seed": 0,
        "rewards": ["correctness_reward", "integer_answer_reward", "strict_format_reward", "soft_format_reward",
                    "tag_count_reward"], "heldout": 16}
TRL_CURVE = "results/lesson08-trl-curve.json"  # the loop's stored seeds (and TRL's curve when recorded)
RECORD_FIX = ("Fix: run `python scripts/lesson08_trl_curve.py --seeds 0,1,2` (7 to 11 minutes a seed, the loop and its "
              "control, on a loaded 2-core machine, 2026-11-29).")


def loop_record(path=None) -> dict:
    """The kit's loop on LOOP's settings, as scripts/lesson08_trl_curve.py stored it: loop_seeds, each seed's reward
    curve and its lr-0 control's; refused with the fix when the file is missing or was made with other settings."""
    import json
    from pathlib import Path

    path = Path(path) if path is not None else Path(__file__).resolve().parents[2] / TRL_CURVE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: it holds lesson 08's loop measured on several seeds. {RECORD_FIX}")
    data = json.loads(path.read_text())
    if data.get("settings") != LOOP:
        raise ValueError(f"{path} was made with {data.get('settings')}, lesson 08's loop runs with {LOOP}. "
                         f"{RECORD_FIX}")
    return data


def window(steps: int) -> int:
    """How many last steps make a curve's final reward: a quarter of the steps, at least 3 (one group is noisy)."""
    return max(3, steps // 4)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def final_reward(curve) -> float:
    """The mean reward of a curve's last window(len(curve)) steps."""
    return _mean(curve[-window(len(curve)):])


def rise_margin(steps: int, record: dict | None = None) -> float:
    """How far above its lr-0 control a loop's final reward must be to count as learning, from the stored controls:
    a run that does not learn is a control, so its final reward strays from the control's mean by a window's noise.
    Twice the root mean square of that straying, over every window of every stored seed's control."""
    record = loop_record() if record is None else record
    k = window(steps)
    strays = [_mean(c[w:w + k]) - _mean(c[:steps]) for c in (s["control"][:max(steps, k)] for s in record["loop_seeds"])
              for w in range(len(c) - k + 1)]
    return 2 * math.sqrt(_mean(x * x for x in strays))


def versus_control(curve, control, margin: float) -> dict:
    """Whether a loop's final reward rose above its lr-0 control's mean by the margin, and a sentence saying so."""
    yours, base = final_reward(curve), _mean(control[:len(curve)])
    rose = yours - base > margin
    text = (f"Your loop's final reward (mean of its last {window(len(curve))} steps) {yours:.3f}, the lr-0 control's "
            f"mean {base:.3f}: {yours - base:+.3f}, {'above' if rose else 'not above'} the margin {margin:.3f} "
            "(twice the noise of a run that does not learn, from the stored seeds' controls).")
    return {"yours": yours, "control": base, "gain": yours - base, "margin": margin, "rose": rose, "text": text}


def plot_curves(yours, control, path=None, title: str = "Mean reward per step (04's five rewards, your correctness reward)"):
    """Your loop's reward curve beside its learning-rate-0 control (the same sampling, no learning), on one axis."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    if yours:
        ax.plot(range(1, len(yours) + 1), yours, marker="o", label="your grpo_train")
    ax.plot(range(1, len(control) + 1), control, marker=".", linestyle="--", label="learning rate 0 (control)")
    ax.set(xlabel="step", ylabel="mean reward of the group", title=title)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig


def sample_group(model, tokenizer, prompt, seed: int, n: int, max_new_tokens: int, temperature: float = 1.0):
    """n completions of one tokenized prompt (plain sampling, TRL's defaults top_k=0, top_p=1.0): the token ids after
    the prompt, padded after their end. model.generate's tokens, decoded on a CPU by helpers.cpu_decode's loop (the
    same ids, bit for bit, in less time)."""
    import torch

    from helpers import cpu_decode

    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        out = cpu_decode.generate(model, prompt["input_ids"], prompt["attention_mask"], do_sample=True,
                                  temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                  num_return_sequences=n, pad_token_id=tokenizer.pad_token_id)
    return out[:, prompt["input_ids"].shape[1]:]


def completion_mask(completion_ids, eos_token_id):
    """1 on every token up to and including the first end-of-sequence token, 0 on the padding after it (TRL's)."""
    import torch

    is_eos = completion_ids == eos_token_id
    eos_at = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), completion_ids.size(1))
    return (torch.arange(completion_ids.size(1)) <= eos_at.unsqueeze(1)).long()


def group_batch(prompt, completion_ids, eos_token_id) -> dict:
    """One group as the batch completion_logps and the loss take: the prompt repeated, the completions, their mask."""
    n = completion_ids.size(0)
    return {"prompt_ids": prompt["input_ids"].repeat(n, 1), "prompt_mask": prompt["attention_mask"].repeat(n, 1),
            "completion_ids": completion_ids, "completion_mask": completion_mask(completion_ids, eos_token_id)}


def loop_rewards(names=None) -> list:
    """The kit's reward functions named in LOOP (helpers.rewards), in order."""
    from helpers import rewards

    return [getattr(rewards, name) for name in (LOOP["rewards"] if names is None else names)]


def total_rewards(batch, reward_funcs) -> list[float]:
    """Each completion's reward: the sum of the reward functions, called as GRPOTrainer calls them."""
    scores = [f(prompts=batch["prompts"], completions=batch["completions"], answer=batch["answer"])
              for f in reward_funcs]
    return [float(sum(s)) for s in zip(*scores)]


def loop_tools(model, tokenizer, questions, seed: int = 0, settings: dict | None = None):
    """sample(step) for lesson 08's loop: a group of LOOP's size for question `step` (sampled with seed * 1000 + step),
    as a batch (prompt_ids, prompt_mask, completion_ids, completion_mask) with what a reward function reads:
    prompts, completions (the decoded texts) and answer (the gold answer), one per completion."""
    s = {**LOOP, **(settings or {})}

    def sample(step):
        row = questions[int(step) % len(questions)]
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        ids = sample_group(model, tokenizer, prompt, seed * 1000 + int(step), s["num_generations"],
                           s["max_completion_length"], s["temperature"])
        batch = group_batch(prompt, ids, tokenizer.eos_token_id)
        n = ids.size(0)
        batch.update(prompts=[row["prompt"]] * n, completions=tokenizer.batch_decode(ids, skip_special_tokens=True),
                     answer=[row["answer"]] * n)
        return batch

    return sample


def loop_model(settings: dict, seed: int):
    """The embedded model with a fresh adapter and sample() for LOOP's questions."""
    from helpers.config import PRESETS
    from helpers.data import training_questions
    from helpers.model import load_cpu

    p = PRESETS["cpu"]
    model, tokenizer = load_cpu(p)
    return model, tokenizer, loop_tools(model, tokenizer, training_questions(p, limit=settings["steps"]), seed, settings)


def control_run(seed: int, settings: dict | None = None, sample=None) -> list[float]:
    """The lr-0 control: the mean reward of each step's group when nothing learns (AdamW at learning rate 0 changes
    nothing, so only the groups are sampled and scored: no backward). sample: the lesson's, before its loop ran."""
    s = {**LOOP, **(settings or {})}
    if sample is None:
        sample = loop_model(s, seed)[2]
    rewards = loop_rewards()
    return [_mean(total_rewards(sample(step), rewards)) for step in range(s["steps"])]


def control_curve(seed: int, steps: int, sample=None) -> tuple[list[float], str]:
    """(the lr-0 control's curve for `steps` steps of seed, where it comes from): stored for the recorded seeds
    (fully determined by the seed and LOOP), else run here with `sample` (no backward: about 6 s a step on 2 cores)."""
    try:
        stored = {s["seed"]: s["control"] for s in loop_record()["loop_seeds"]}
    except (FileNotFoundError, ValueError):
        stored = {}
    if len(stored.get(seed, [])) >= steps:
        return stored[seed][:steps], f"stored in {TRL_CURVE} (seed {seed})"
    return control_run(seed, {"steps": steps}, sample), "run here (no backward: the model does not change)"
