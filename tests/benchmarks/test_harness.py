"""The benchmark harness's captions name the machine as the model cards do."""

import torch

from benchmarks import harness
from zoo.lineage import device_name


def test_captions_name_the_cpu_model_threads_and_torch():
    caption = harness.machine()
    assert caption == f"{device_name('cpu')}, torch {torch.__version__}"
    assert f"({torch.get_num_threads()} threads)" in caption
