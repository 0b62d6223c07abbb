"""Every family trains under CPU autocast in each lower precision, on every CPU kind.

These are precision-sensitive tests: ``make test`` (what ``.ci/run`` calls) runs them again
(``-m precision``) with oneDNN and ATen limited to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2``), so an AMX machine also checks what an AVX2-only CPU can compute.
The LSTM under bf16 autocast had no oneDNN primitive there; fp16 has none on any CPU of ours.
"""

import pytest
import torch

import zoo
from zoo.models.registry import get_preset

pytestmark = pytest.mark.precision

# one preset per family, its `*_tiny` one (the family's tests cover its other presets in fp32)
FAMILIES = {}
for _name in sorted(zoo.list_models(), key=lambda n: not n.endswith("_tiny")):
    FAMILIES.setdefault(get_preset(_name).family, _name)


def _tiny(name: str) -> torch.nn.Module:
    preset = get_preset(name)
    assert name.endswith("_tiny"), f"{preset.family} has no *_tiny preset"
    torch.manual_seed(0)
    return preset.model_cls(preset.config).train()


def _loss(model: torch.nn.Module) -> torch.Tensor:
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    if getattr(model, "is_encoder_decoder", False):
        src = torch.randint(1, V, (2, 7), generator=g)
        src[1, 5:] = model.config.pad_id  # padding: the LSTM's packed path
        tgt = torch.randint(1, V, (2, 5), generator=g)
        return model(src, tgt).logits.logsumexp(-1).mean()
    idx = torch.randint(0, V, (2, 16), generator=g)
    return model(idx).logits.logsumexp(-1).mean()


def test_every_family_is_covered():
    assert {"lstm_seq2seq", "transformer_lm", "transformer_seq2seq", "routing_transformer_lm",
            "sparse_transformer_lm", "image_transformer_lm"} <= set(FAMILIES)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_and_backward_under_cpu_autocast(family, dtype):
    """A training step under ``torch.autocast("cpu", dtype)`` (what Lightning's ``bf16-mixed`` and
    ``16-mixed`` do on a CPU): a finite loss, close to fp32's, and a finite gradient everywhere."""
    model = _tiny(FAMILIES[family])
    with torch.no_grad():
        ref = _loss(model).item()
    with torch.autocast("cpu", dtype=dtype):
        loss = _loss(model)
    loss.backward()
    assert torch.isfinite(loss)
    assert abs(loss.item() - ref) < 0.1 * max(1.0, abs(ref)), (loss.item(), ref)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_lstm_under_autocast_runs_its_recurrence_in_fp32():
    """The LSTM's outputs under bf16 autocast equal fp32's up to the bf16 linear layers after it:
    the recurrence itself ran in fp32 (``zoo.models.rnn_seq2seq._run_lstm``)."""
    from zoo.models.rnn_seq2seq import _run_lstm

    lstm = torch.nn.LSTM(8, 8, batch_first=True)
    x = torch.randn(2, 3, 8)
    ref, (h, c) = lstm(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h16, c16) = _run_lstm(lstm, x, None)
    assert out.dtype == torch.float32 and h16.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
