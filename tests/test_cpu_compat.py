import torch

from helpers.cpu_compat import TorchChunkedLogProb, patch_trl_for_cpu


def test_stand_in_matches_full_log_softmax_and_its_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(7, 5, requires_grad=True)
    weight = torch.randn(11, 5, requires_grad=True)
    targets = torch.randint(0, 11, (7,))
    logp, entropy, lssp, mean_logits, top1 = TorchChunkedLogProb.apply(
        hidden, weight, None, targets, 0.7, 4, None, 1.0, ("entropy", "is_top1"))
    ref = torch.log_softmax(hidden @ weight.t() / 0.7, -1)
    assert torch.allclose(logp, ref.gather(-1, targets[:, None]).squeeze(-1), atol=1e-5)
    assert torch.allclose(entropy, -(ref.exp() * ref).sum(-1), atol=1e-5)
    assert lssp is None and mean_logits is None and top1.dtype == torch.bool
    logp.sum().backward()
    g = hidden.grad.clone()
    hidden.grad = None
    ref.gather(-1, targets[:, None]).sum().backward()
    assert torch.allclose(g, hidden.grad, atol=1e-5)


def test_patch_installs_only_when_trl_lacks_the_kernel():
    from trl.trainer import utils

    patched = patch_trl_for_cpu()
    assert utils._ChunkedLogProbFunction is not None
    assert patch_trl_for_cpu() is False  # idempotent
    assert isinstance(patched, bool)
