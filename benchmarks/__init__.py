"""The zoo's benchmarks: scripts that measure, kept out of the wheel (issue 21).

Run each from the repository root (``--help`` lists its options; the tables go to docs/bench/):

    python -m benchmarks.attention_kernels           # the kernel layer: Triton vs FlexAttention, SDPA, `_ref`
    python -m benchmarks.sparse_layer      # one attention layer, dense vs sparse, on the CPU
    python -m benchmarks.routing_lm        # a routing LM's training step, ours vs routing-transformer
    python benchmarks/import_time.py       # how long `import zoo` takes

``harness`` is what the CPU benchmarks share: one measurement per fresh process, peak RSS, growth
exponents, the markdown table and the plot.
"""
