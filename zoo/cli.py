"""The ``zoo`` command.

- ``zoo fit | validate | test | predict --config recipes/...yaml``: LightningCLI (jsonargparse), so every
  constructor argument of the LightningModule, DataModule and Trainer is a flag or a YAML key, and
  ``--print_config`` prints the resolved config.
- ``zoo generate --checkpoint CKPT --prompt TEXT``: sample text from a Lightning checkpoint (``.ckpt``),
  a published checkpoint (``zoo list``), a Hub repo id or a directory written by ``save_pretrained``.
- ``zoo sample --checkpoint CKPT --out grid.png``: image samples and top-half completions.
- ``zoo translate --checkpoint CKPT < source.txt``: translate text with an encoder-decoder model.
- ``zoo average RUN/checkpoints/every100 --last 5 --out averaged.ckpt``: checkpoint averaging.
- ``zoo list | pull | evaluate | export | push``: published checkpoints.
- ``zoo models``: the registered models.
- ``zoo pattern NAME --out FILE.png``: draw an attention pattern of the catalogue (like Figure 3 of
  the Sparse Transformer paper).
- ``zoo bench | verify``: time and memory on this machine; golden logits of a published model.
- ``zoo migrate CKPT``: record the architecture in a ``.ckpt`` written before it was recorded.

This module only parses the command and calls it: :data:`COMMANDS` names the module and function
of each (under :mod:`zoo.commands`), imported only when that command runs.
"""

from __future__ import annotations

import signal
import sys

from zoo.commands.common import one_line_warnings
from zoo.errors import ZooError, ZooWarning

__all__ = ["COMMANDS", "main"]

USAGE = """usage: zoo <command> [options]

commands:
  fit | validate | test   train and evaluate with Lightning (see `zoo fit --help`)
  predict                 sample continuations of --data.init_args.prompts through Lightning
  generate                sample text from a checkpoint (see `zoo generate --help`)
  sample                  sample images and completions to PNG grids (image models)
  translate               translate text (stdin or --input) with an encoder-decoder model
  average                 average the weights of a run's last N checkpoints
  list                    the published checkpoints (checkpoints.yaml)
  pull                    download and verify a published checkpoint
  evaluate                bits/byte or bits/dim of a model on a split; --registered re-measures
  export | push           publish a trained run (folder with model card; Hugging Face Hub)
  models                  list the registered models
  pattern                 draw an attention pattern to PNG (see `zoo pattern --help`)
  verify                  recompute a published model's golden logits and report any drift
  bench                   time and memory of a checkpoint on this machine (bench.md/.json/.png)
  migrate                 record the architecture in an older .ckpt you trust (docs/security.md)

A recipe may name classes of the zoo, Lightning and torch.optim; add --allow_class_path PREFIX to
fit | validate | test | predict for others you trust (docs/security.md).

Every command has its own --help (`zoo fit --model.help CausalLM`: a task's settings).

examples:
  zoo fit --config recipes/transformer_lm/pg19mini.yaml
  zoo generate --checkpoint transformer_lm_small.pg19mini --prompt "It was"
"""


def zoo_error(exc: BaseException) -> ZooError | None:
    """The zoo error behind ``exc``, if any (jsonargparse wraps errors raised in constructors)."""
    while exc is not None:
        if isinstance(exc, ZooError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``zoo`` console script; zoo errors exit with status 2 and their message.

    A fit stopped by SIGTERM or Ctrl-C (SIGINT) exits 143 or 130 (128 + the signal, as a shell
    reports it) with the checkpoint to resume from (:func:`zoo.callbacks.resume_hint`); Ctrl-C
    elsewhere exits 130 without a traceback. Nothing heavy (Lightning, torch) is imported here:
    each command imports what it needs once its arguments are parsed, so ``--help`` answers at once.

    Raises:
        SystemExit: with the command's status (2 for a zoo error, in one line).
    """
    try:
        # the zoo's own warnings (ZooWarning: a retired checkpoint) as one line each
        with one_line_warnings("zoo", ZooWarning):
            _main(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        if _stopped_by_sigterm(e):  # Lightning's SIGTERMException: status 0, the run did not finish
            print(f"zoo: stopped by SIGTERM; {_resume_hint()}", file=sys.stderr)
            sys.exit(128 + signal.SIGTERM)
        # Lightning ends a fit stopped by Ctrl-C with sys.exit(1)
        if e.code != 1 or not isinstance(e.__context__, KeyboardInterrupt):
            raise
        print(f"zoo: stopped by Ctrl-C (SIGINT); {_resume_hint()}", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except KeyboardInterrupt:
        print("zoo: stopped by Ctrl-C (SIGINT)", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except Exception as e:
        cause = zoo_error(e)
        if cause is None:
            raise
        print(f"zoo: error: {cause}", file=sys.stderr)
        sys.exit(2)


def _stopped_by_sigterm(exc: SystemExit) -> bool:
    """Whether ``exc`` is Lightning's ``SIGTERMException``: only a command that imported Lightning
    can raise it, so Lightning is looked up, never imported, here."""
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return exceptions is not None and isinstance(exc, exceptions.SIGTERMException)


def _resume_hint() -> str:
    from zoo.callbacks import resume_hint  # Lightning is loaded already: a fit was running

    return resume_hint()


COMMANDS = {  # command -> (module, function taking the remaining arguments), imported when run
    "generate": ("zoo.commands.generate", "generate_main"),
    "sample": ("zoo.commands.generate", "sample_main"),
    "translate": ("zoo.commands.translate", "translate_main"),
    "average": ("zoo.commands.average", "average_main"),
    "models": ("zoo.commands.models", "models_main"),
    "pattern": ("zoo.commands.models", "pattern_main"),
    "list": ("zoo.commands.listing", "list_main"),
    "pull": ("zoo.commands.pull", "pull_main"),
    "evaluate": ("zoo.commands.evaluate", "evaluate_main"),
    "export": ("zoo.commands.export", "export_main"),
    "push": ("zoo.commands.push", "push_main"),
    "bench": ("zoo.commands.bench", "bench_main"),
    "verify": ("zoo.commands.verify", "verify_main"),
    "migrate": ("zoo.commands.migrate", "migrate_main"),
}
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _main(args: list[str]) -> None:
    import importlib

    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return
    command, rest = args[0], args[1:]
    if command in LIGHTNING_COMMANDS:
        from zoo.commands.lightning import run_lightning

        run_lightning(args)
    elif command in COMMANDS:
        module, function = COMMANDS[command]
        getattr(importlib.import_module(module), function)(rest)
    else:
        sys.exit(f"zoo: unknown command {command!r}\n\n{USAGE}")


if __name__ == "__main__":
    main()
