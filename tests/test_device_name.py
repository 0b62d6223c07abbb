"""zoo.lineage.device_name: the hardware string on cards and benchmark tables names a GPU's form
factor (SXM or PCIe), which its name alone often does not."""

import subprocess

import pytest
import torch

from zoo import lineage


@pytest.mark.parametrize(
    ("name", "watts", "want"),
    [
        ("NVIDIA H100 80GB HBM3", 700.0, "SXM"),
        ("NVIDIA H100 PCIe", 350.0, "PCIe"),
        ("NVIDIA H100 NVL", 400.0, "PCIe"),
        ("NVIDIA H200", 700.0, "SXM"),
        ("NVIDIA H200 NVL", 600.0, "PCIe"),
        ("NVIDIA A100-SXM4-80GB", 400.0, "SXM"),
        ("NVIDIA H200", None, None),  # no power limit, no guess
        ("NVIDIA GeForce RTX 4090", 450.0, None),
    ],
)
def test_form_factor(name, watts, want):
    assert lineage.form_factor(name, watts) == want


def fake_gpu(monkeypatch, name, smi_output):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def run(cmd, **kwargs):
        assert cmd[0] == "nvidia-smi" and "--id=0" in cmd
        if smi_output is None:
            raise FileNotFoundError("nvidia-smi")
        return subprocess.CompletedProcess(cmd, 0, stdout=smi_output, stderr="")

    monkeypatch.setattr(lineage.subprocess, "run", run)


def test_cuda_name_carries_form_factor_and_power(monkeypatch):
    fake_gpu(monkeypatch, "NVIDIA H200", "700.00\n")
    assert lineage.device_name("cuda") == "NVIDIA H200 (SXM, 700 W)"


def test_without_nvidia_smi_the_name_alone(monkeypatch):
    fake_gpu(monkeypatch, "NVIDIA H200", None)
    assert lineage.device_name("cuda:0") == "NVIDIA H200"


def test_cpu_name_unchanged():
    assert lineage.device_name("cpu").endswith(f"({torch.get_num_threads()} threads)")
