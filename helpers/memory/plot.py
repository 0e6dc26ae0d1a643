"""The memory estimate as a picture: stacked bars of the peak phase's components against the budget and the card."""

from __future__ import annotations

from helpers.memory.estimate import COMPONENTS, T4_BUDGET_GB, MemoryEstimate

_COLORS = {"weights": "#4c72b0", "lora_params": "#55a868", "optimizer_states": "#8172b2", "gradients": "#64b5cd",
           "activations": "#dd8452", "logits": "#c44e52", "vllm_reservation": "#937860", "kv_cache": "#da8bc3",
           "reference_model": "#8c8c8c", "cuda_context_and_allocator": "#ccb974"}


def plot_breakdown(estimates_or_one, budget_gb: float = T4_BUDGET_GB, gpu_total_gb: float = 14.56, ax=None, labels=None):
    """Stacked bars of each estimate's peak-phase components, with lines at the budget and the card; returns the figure."""
    # matplotlib loads on the first plot: helpers.train and `python -m helpers.memory` import this package and never draw
    import matplotlib.pyplot as plt

    ests = [estimates_or_one] if isinstance(estimates_or_one, MemoryEstimate) else list(estimates_or_one)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(ests) + 3), 4.5))
    else:
        fig = ax.figure
    labels = labels or [f"{e.model}\n{e.peak_gb:.1f} GB" for e in ests]
    bottoms = [0.0] * len(ests)
    for name in COMPONENTS:
        values = [e.components.get(name, 0.0) for e in ests]
        if not any(v > 0.005 for v in values):
            continue
        label = "vllm_reservation (beyond the weights)" if name == "vllm_reservation" else name
        ax.bar(range(len(ests)), values, bottom=bottoms, color=_COLORS[name], label=label, width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.axhline(budget_gb, color="green", linestyle="--", label=f"budget {budget_gb:g} GB")
    ax.axhline(gpu_total_gb, color="red", linestyle=":", label=f"T4 as PyTorch sees it {gpu_total_gb:g} GB")
    ax.set_xticks(range(len(ests)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("predicted GPU memory (GB)")
    ax.set_title("Where GRPO's GPU memory goes (peak phase)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
