import math
from dataclasses import replace

import pytest
import torch

from zoo.tasks import CausalLM
from zoo.tasks.causal_lm import lr_lambda


def test_inverse_sqrt_is_the_transformer_schedule():
    d_model, warmup = 512, 4000
    f = lr_lambda("inverse_sqrt", warmup, total_steps=100_000)
    peak = d_model**-0.5 * warmup**-0.5
    for step in (1, 100, 3999, 4000, 4001, 20000):
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert peak * f(step - 1) == pytest.approx(paper, rel=1e-9)


def test_cosine_warms_up_then_decays_to_the_floor():
    f = lr_lambda("cosine", warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    assert f(0) == pytest.approx(0.1)
    assert f(9) == pytest.approx(1.0)
    assert f(59) == pytest.approx(0.55)
    assert f(109) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(9, 200))


def test_training_steps_lower_the_loss():
    torch.manual_seed(0)
    module = CausalLM("transformer_lm_tiny", lr=3e-3)
    x = torch.randint(0, 256, (4, 32))
    batch = (x[:, :-1], x[:, 1:])
    opt = torch.optim.AdamW(module.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        nll, count = module._nll(batch)
        loss = nll / count
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > math.log(256) - 0.5  # untrained: no better than uniform over bytes
    assert losses[-1] < losses[0] - 1.0


def test_ignored_targets_do_not_count():
    module = CausalLM("transformer_lm_tiny")
    x = torch.randint(0, 256, (2, 8))
    y = x.clone()
    y[:, 4:] = -100
    nll, count = module._nll((x, y))
    assert count.item() == 8


def _fit_batches(module, batches):
    """Train on ``batches`` (one epoch) with a plain Lightning Trainer; return the weights after."""
    from lightning import Trainer
    from torch.utils.data import DataLoader

    trainer = Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    return {k: v.clone() for k, v in module.model.state_dict().items()}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("fault", [None, "loss", "gradient"])
def test_a_non_finite_step_is_skipped_and_leaves_the_weights(fault):
    torch.manual_seed(0)
    module = CausalLM("transformer_lm_tiny", lr=1e-2, warmup_steps=0)
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    x = torch.randint(0, 256, (2, 17))
    if fault == "loss":
        module.model.register_forward_hook(
            lambda mod, args, out: replace(out, logits=out.logits * float("nan"))
        )
    if fault == "gradient":
        module.model.lm_head.weight.register_hook(lambda g: g * float("inf"))
    after = _fit_batches(module, [(x[:, :-1], x[:, 1:])] * 2)
    changed = any(not torch.equal(before[k], after[k]) for k in before)
    assert changed == (fault is None)
    assert module.skipped_steps == (0 if fault is None else 2)
    assert all(v.isfinite().all() for v in after.values())


def test_the_optimizer_is_one_fused_adamw_step():
    """AdamW with fused=True, weight decay on the matrices only: the same update as the default
    (foreach) AdamW on the same groups, to rounding, in one kernel for all parameters."""
    torch.manual_seed(0)
    module = CausalLM("transformer_lm_tiny", warmup_steps=0, weight_decay=0.1)
    optimizer = module.configure_optimizers()["optimizer"]
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"] is True
    skip = ("params", "fused", "foreach")
    copies = [
        [p.detach().clone().requires_grad_() for p in g["params"]] for g in optimizer.param_groups
    ]
    reference = torch.optim.AdamW(
        [{**{k: v for k, v in g.items() if k not in skip}, "params": c}
         for g, c in zip(optimizer.param_groups, copies, strict=True)]
    )  # fmt: skip
    assert [g["weight_decay"] for g in reference.param_groups] == [0.1, 0.0]
    ours = [p for g in optimizer.param_groups for p in g["params"]]
    theirs = [p for c in copies for p in c]
    for _ in range(3):
        for p, q in zip(ours, theirs, strict=True):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        optimizer.step()
        reference.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_compiled_step_is_the_eager_step(dtype):
    """compile=True: the logits, the loss and one AdamW update of the eager model, to rounding,
    in fp32 and under bf16 autocast; the weights keep their names (checkpoints load either way)."""
    torch._dynamo.reset()
    modules = []
    for compile in (False, True):
        torch.manual_seed(0)
        modules.append(CausalLM("transformer_lm_tiny", warmup_steps=0, compile=compile))
    eager, compiled = modules
    assert list(compiled.state_dict()) == list(eager.state_dict())
    torch.manual_seed(1)
    x = torch.randint(0, 256, (2, 24))
    results = []
    for module in modules:
        optimizer = module.configure_optimizers()["optimizer"]
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            logits = module.model(x).logits
            nll, count = module._nll((x, x))
        (nll / count).backward()
        optimizer.step()
        results.append((logits.float(), nll, [p.detach().clone() for p in module.parameters()]))
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(results[1][0], results[0][0], **tol)
    torch.testing.assert_close(results[1][1], results[0][1], **tol)
    for p, q in zip(results[1][2], results[0][2], strict=True):
        torch.testing.assert_close(p, q, **tol)
    assert compiled.model._compiled_call_impl is not None and eager.model._compiled_call_impl is None


def test_a_model_the_backend_cannot_compile_is_one_clear_error():
    from torch._dynamo.exc import BackendCompilerFailed

    from zoo.errors import ConfigError

    module = CausalLM("transformer_lm_tiny", compile=True)

    def broken(*args, **kwargs):
        raise BackendCompilerFailed(broken, RuntimeError("C++ compile error\nline 2"), None)

    module.model._compiled_call_impl = broken
    x = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(ConfigError, match=r"\(RuntimeError: C\+\+ compile error\): run without "):
        module._nll((x, x))
    module.model._compiled_call_impl = lambda *a, **k: (_ for _ in ()).throw(KeyError("bug"))
    with pytest.raises(KeyError):  # not every error is called a compile failure
        module._nll((x, x))
