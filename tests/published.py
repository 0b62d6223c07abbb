"""The tiny published checkpoint the hub and publishing tests share (the ``published`` fixture in
conftest.py): its name, repo id, metric, and a weight comparison."""

from pathlib import Path

import torch

import zoo
from zoo.hub import Metric

REPO = Path(__file__).resolve().parents[1]
NAME = "transformer_lm_tiny.pg19mini"
REPO_ID = "attention-zoo/transformer_lm_tiny.pg19mini"
METRIC = Metric("bits_per_byte", 7.9, "pg19mini", "test", 4, 1020, "32-true", context=256)


def assert_same_weights(model, folder: Path) -> None:
    ref = zoo.from_pretrained(folder).state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(v, ref[k]), k
