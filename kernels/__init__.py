"""zoo.kernels: the kernel layer (block-sparse and routing attention).

Each op is an ``op_ref`` in pure PyTorch (the executable spec, runs anywhere) plus a Triton path used
when Triton is importable and the tensors are on CUDA. This package must import on machines without
Triton or a GPU; the Triton code is imported lazily. The ops arrive with the Sparse and Routing
Transformer issues.
"""

__all__: list[str] = []
