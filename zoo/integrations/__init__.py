"""The zoo inside other tools, each an optional extra imported on its own:

- :mod:`zoo.integrations.transformers`: transformers' Auto classes, ``generate`` (with the zoo's
  own cache), pipelines and ``Trainer`` take zoo checkpoints (``pip install
  "attention-zoo[transformers]"``); its parts: ``transformers_base`` (config, loading, saving),
  ``transformers_loading`` (transformers' loading keywords), ``transformers_cache`` (the
  ``Cache`` objects), ``transformers_seq2seq`` (encoder-decoders), ``transformers_tokenizers``;
- :mod:`zoo.integrations.lm_eval_harness`: EleutherAI's lm-evaluation-harness scores zoo language
  models as its model ``zoo`` (``pip install "attention-zoo[lm-eval]"``).
"""
