"""The zoo inside other tools, each an optional extra imported on its own:

- :mod:`zoo.integrations.transformers`: transformers' Auto classes, ``generate`` and pipelines load
  zoo checkpoints (``pip install "attention-zoo[transformers]"``);
- :mod:`zoo.integrations.lm_eval_harness`: EleutherAI's lm-evaluation-harness scores zoo language
  models as its model ``zoo`` (``pip install "attention-zoo[lm-eval]"``).
"""
