import math

import torch

from zoo.metrics import BitsPerByte


def test_bits_per_byte_is_nats_over_ln2():
    metric = BitsPerByte()
    metric.update(torch.tensor(10.0), 4)
    metric.update(torch.tensor(2.0), 2)
    assert metric.compute().item() == __import__("pytest").approx(12.0 / 6 / math.log(2), rel=1e-6)


def test_uniform_bytes_are_eight_bits():
    logits = torch.zeros(5, 256)
    targets = torch.randint(0, 256, (5,))
    nll = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
    metric = BitsPerByte()
    metric.update(nll, 5)
    assert abs(metric.compute().item() - 8.0) < 1e-5
