"""Scale-out through Lightning: `zoo fit` of a tiny Routing Transformer under DDP (gloo, 2 CPU
processes) against one process on the same global batch, and the routing centroids under what
`--trainer.strategy fsdp` builds (docs/scaling.md).

Every fit is a subprocess of the `zoo` script: Lightning's DDP launcher starts the other ranks by
re-running the parent's command line, which inside pytest would be pytest itself.

The data make the two runs comparable: ``train_samples_per_epoch = 2B`` windows form ONE global
batch, so every epoch (= every optimizer step) trains on the same 2B windows, whichever way
Lightning's DistributedSampler shuffles and splits them (B per rank under DDP, 2B in one batch
alone). Every rank has the same number of tokens, so the mean of the ranks' losses is the loss of
the global batch, and DDP's averaged gradient is the global batch's gradient.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from zoo.attention.kmeans import SphericalKMeans
from zoo.models.registry import create_model
from zoo.models.transformer import TransformerBlock

TESTS = Path(__file__).resolve().parent
RECIPE = TESTS.parent / "recipes" / "routing_transformer" / "pg19mini.yaml"
ZOO = Path(sys.executable).parent / "zoo"  # the venv's `zoo` script
B, T, STEPS = 2, 64, 3  # windows per rank, window length, optimizer steps
# the paper's centroid update alone (Roy et al. 2020, Algorithm 1): random initial centroids, no
# revival. The preset's defaults fit the centroids to the first batch and revive small clusters,
# which under DDP look at rank 0's shard only (see test_default_centroids_stay_in_sync_too).
PAPER_EMA = '{"centroid_init": "random", "revive_below": 0.0}'
CENTROIDS = "attention.kmeans.centroids"


def fit(out: Path, devices: int, model_config: str | None = None) -> list[dict]:
    """``zoo fit`` of routing_transformer_tiny for STEPS steps of 2B windows on ``devices``
    processes; returns what each rank held (tests/ddp_probe.py) plus the checkpoint."""
    out.mkdir()
    probe = f'{{"class_path": "ddp_probe.RankProbe", "init_args": {{"out": "{out}"}}}}'
    args = [
        str(ZOO), "fit", "--config", str(RECIPE),
        "--model.init_args.model=routing_transformer_tiny",
        "--model.init_args.warmup_steps=1",  # full learning rate from the first step
        f"--data.init_args.seq_len={T}",
        f"--data.init_args.batch_size={2 * B // devices}",
        f"--data.init_args.train_samples_per_epoch={2 * B}",  # one global batch per epoch
        "--data.init_args.eval_batch_size=2",
        f"--trainer.max_steps={STEPS}",
        f"--trainer.val_check_interval={STEPS}",
        "--trainer.limit_val_batches=1",
        "--trainer.precision=32-true",  # bf16-mixed (the default with AMX) would blur the comparison
        "--trainer.accelerator=cpu",
        f"--trainer.devices={devices}",
        f"--trainer.default_root_dir={out}",
        f"--trainer.callbacks+={probe}",
        "--allow_class_path", "ddp_probe",  # the test's own callback: allowed by name
    ]  # fmt: skip
    if devices > 1:
        args.append("--trainer.strategy=ddp")  # gloo on CPU
    if model_config is not None:
        args.append(f"--model.init_args.model_config={model_config}")
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}  # the probe's module
    done = subprocess.run(args, cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(devices)]
    ckpt = out / "runs" / "routing_transformer" / "pg19mini" / "checkpoints" / "last.ckpt"
    ranks[0]["checkpoint"] = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    return ranks


@pytest.fixture(scope="module")
def paper_ema(tmp_path_factory, data_dir):
    run = tmp_path_factory.mktemp("ddp")
    return fit(run / "single", 1, PAPER_EMA), fit(run / "ddp", 2, PAPER_EMA)


def assert_centroids_in_sync(ranks: list[dict]) -> None:
    """After every step every rank holds the same centroids, bit for bit, and the checkpoint
    (written by rank 0) holds what every rank had after the last step."""
    names = sorted(ranks[0]["centroids"][0])
    assert len(names) == 2  # a routing layer in each of the tiny preset's 2 layers
    for step in range(STEPS):
        for name in names:
            held = [r["centroids"][step][name] for r in ranks]
            for rank, other in enumerate(held[1:], 1):
                assert torch.equal(other, held[0]), (
                    f"step {step + 1}, {name}: rank {rank} differs from rank 0 by up to "
                    f"{(other - held[0]).abs().max():.3g}"
                )
    for name in names:
        for rank, r in enumerate(ranks):
            assert torch.equal(ranks[0]["checkpoint"]["model." + name], r["centroids"][-1][name]), (
                f"{name}: the checkpoint is not what rank {rank} held after the last step"
            )


def test_ddp_splits_the_global_batch(paper_ema):
    """The premise of the comparison: 2 ranks of B windows are the single run's 2B windows."""
    (single,), ddp = paper_ema
    assert [r["world_size"] for r in ddp] == [2, 2]
    assert [r["global_step"] for r in (single, *ddp)] == [STEPS] * 3
    for step in range(STEPS):
        rows = [tuple(x) for r in ddp for x in r["inputs"][step].tolist()]
        assert len(set(rows)) == 2 * B  # the ranks' windows are disjoint
        assert sorted(rows) == sorted(tuple(x) for x in single["inputs"][step].tolist())


def test_ddp_centroids_identical_on_every_rank(paper_ema):
    """Each rank updates the centroids from the statistics of the global batch (all-reduced), so
    they agree bit for bit after every step. Updated from each rank's own shard they would part
    at every step (and DDP's buffer broadcast at the next forward would hide it)."""
    assert_centroids_in_sync(paper_ema[1])


def test_ddp_matches_one_process_on_the_global_batch(paper_ema):
    """The mean of the ranks' losses is the single run's loss at every step; the centroids after
    every step and the weights after STEPS steps are the single run's."""
    (single,), ddp = paper_ema
    mean = torch.tensor([r["losses"] for r in ddp]).mean(0)
    torch.testing.assert_close(mean, torch.tensor(single["losses"]), rtol=1e-5, atol=0)
    for step in range(STEPS):
        for name, value in single["centroids"][step].items():
            got, where = ddp[0]["centroids"][step][name], f"step {step + 1}, {name}"
            torch.testing.assert_close(got, value, rtol=0, atol=1e-5, msg=where)
    # measured: losses within 2e-7 (relative), centroids 1e-7, weights 3e-6; with each rank's
    # centroids updated from its own shard: losses 2e-4 apart after one step, centroids 0.03-0.1
    for name, value in single["state"].items():
        torch.testing.assert_close(ddp[0]["state"][name], value, rtol=0, atol=2e-5, msg=name)


def test_default_centroids_stay_in_sync_too(tmp_path, data_dir):
    """The preset's defaults: centroids fitted to the first batch, small clusters revived. Both
    steps run on rank 0's shard and are broadcast, so the ranks still agree bit for bit."""
    ddp = fit(tmp_path / "ddp", 2)
    assert all(all(r["fitted"]) for r in ddp)
    assert ddp[0]["revived"] > 0 and ddp[0]["revived"] == ddp[1]["revived"]
    assert_centroids_in_sync(ddp)


def _fsdp_worker(rank: int, store: str, out: str) -> None:
    from lightning.pytorch.plugins.precision import FSDPPrecision
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = create_model("routing_transformer_tiny")  # k-means init and revival: the defaults
    kmeans = [m for m in model.modules() if isinstance(m, SphericalKMeans)]
    # what `--trainer.strategy fsdp` builds with that policy (the CLI parses a list of class
    # paths into this set) and precision bf16-mixed
    policy = FSDPStrategy(auto_wrap_policy={TransformerBlock}).kwargs["auto_wrap_policy"]
    sharded = FSDP(
        model,
        device_id=torch.device("cpu"),
        mixed_precision=FSDPPrecision("bf16-mixed").mixed_precision_config,
        auto_wrap_policy=policy,
        use_orig_params=True,
    )
    optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (2 * B, T), generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        sharded(x.chunk(2)[rank]).logits.float().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    held = [m.centroids.clone() for m in kmeans]
    saved = sharded.state_dict()
    torch.save(
        {
            "units": sum(isinstance(m, FSDP) for m in sharded.modules()),
            "strategy": str(sharded.sharding_strategy),
            "fitted": [not m.needs_init for m in kmeans],
            "held": held,
            "saved": [saved[k] for k in sorted(saved) if k.endswith(CENTROIDS)],
        },
        f"{out}.{rank}",
    )
    dist.destroy_process_group()


def test_fsdp_bf16_keeps_the_centroids_fp32_and_in_sync(tmp_path):
    """What `--trainer.strategy fsdp` builds on a bf16 GPU (Lightning's FSDP mixed precision for
    bf16-mixed, one FSDP unit per TransformerBlock), run by torch's FSDP on 2 CPU processes:
    Lightning's FSDP strategy refuses CPUs. That precision casts every floating buffer to bf16;
    the centroids must come back to fp32 (bf16 ones failed the forward), train in fp32, stay
    equal on both ranks (FSDP, unlike DDP, never broadcasts buffers: only the all-reduce keeps
    them together) and be saved in fp32."""
    from lightning.pytorch.plugins.precision import FSDPPrecision

    assert FSDPPrecision("bf16-mixed").mixed_precision_config.buffer_dtype == torch.bfloat16
    out = str(tmp_path / "rank")
    torch.multiprocessing.spawn(_fsdp_worker, args=(str(tmp_path / "store"), out), nprocs=2)
    ranks = [torch.load(f"{out}.{r}") for r in range(2)]
    for r in ranks:
        assert r["units"] == 3 and r["strategy"] == "ShardingStrategy.FULL_SHARD"  # root + 2 blocks
        assert all(r["fitted"]) and len(r["held"]) == len(r["saved"]) == 2
        for held, saved in zip(r["held"], r["saved"], strict=True):
            assert held.dtype == saved.dtype == torch.float32 and torch.equal(held, saved)
            assert (held - held.bfloat16().float()).abs().max() > 1e-4  # off bf16's grid
    for a, b in zip(ranks[0]["held"], ranks[1]["held"], strict=True):
        assert torch.equal(a, b), f"the ranks' centroids differ by up to {(a - b).abs().max():.3g}"
