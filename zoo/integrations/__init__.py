"""The zoo inside other tools, each an optional extra imported on its own:

- :mod:`zoo.integrations.lm_eval_harness`: EleutherAI's lm-evaluation-harness scores zoo language
  models as its model ``zoo`` (``pip install "attention-zoo[lm-eval]"``).
"""
