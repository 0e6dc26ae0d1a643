"""Make TRL's GRPOTrainer run on a CPU-only PyTorch.

TRL 1.15 computes GRPO's per-token log-probabilities with a Triton kernel (trl.kernels.ChunkedLogProbFunction).
CPU builds of PyTorch ship no Triton, so TRL sets that kernel to None and the first training step fails with
"'NoneType' object has no attribute 'apply'" (docs/unsloth-cpu-backend.md). Unsloth's CPU backend fixes this
the same way: a plain-PyTorch function with the kernel's signature. On a GPU nothing here is used.
"""

from __future__ import annotations

import torch


class TorchChunkedLogProb:
    """Same inputs and outputs as trl.kernels.ChunkedLogProbFunction.apply, computed with ordinary autograd.

    Returns (log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1); the optional ones are None unless named
    in `outputs`. Tokens are processed in chunks so the [tokens, vocab] logits never exist all at once.
    """

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")):
        pieces = {name: [] for name in ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")}
        token_chunk = max(1, 4096)
        for start in range(0, hidden.shape[0], token_chunk):
            logits = hidden[start:start + token_chunk].float() @ weight.float().t()
            if bias is not None:
                logits = logits + bias.float()
            logits = logits * logit_scale
            if final_logit_softcapping is not None:
                logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
            logits = logits / temperature
            target = targets[start:start + token_chunk].unsqueeze(-1)
            log_softmax = torch.log_softmax(logits, dim=-1)
            pieces["log_probs"].append(log_softmax.gather(-1, target).squeeze(-1))
            if "entropy" in outputs:
                pieces["entropy"].append(-(log_softmax.exp() * log_softmax).sum(-1))
            if "log_sum_sq_probs" in outputs:
                pieces["log_sum_sq_probs"].append(torch.logsumexp(2 * log_softmax, dim=-1).detach())
            if "mean_logits" in outputs:
                pieces["mean_logits"].append(logits.mean(-1).detach())
            if "is_top1" in outputs:
                target_logit = logits.gather(-1, target).squeeze(-1)
                pieces["is_top1"].append((target_logit >= logits.max(-1).values).detach())
        return tuple(torch.cat(v) if v else None for v in pieces.values())


def patch_trl_for_cpu() -> bool:
    """Install the stand-in when TRL has no Triton kernel; return True if it was needed."""
    from trl.trainer import utils

    if getattr(utils, "_ChunkedLogProbFunction", None) is not None:
        return False
    utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return True
