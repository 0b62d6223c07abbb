"""The ``zoo`` command.

- ``zoo fit | validate | test | predict --config recipes/...yaml``: LightningCLI (jsonargparse), so every
  constructor argument of the LightningModule, DataModule and Trainer is a flag or a YAML key, and
  ``--print_config`` prints the resolved config.
- ``zoo generate --checkpoint CKPT --prompt TEXT``: sample text from a Lightning checkpoint (``.ckpt``),
  a published checkpoint (``zoo list``), a Hub repo id or a directory written by ``save_pretrained``.
- ``zoo sample --checkpoint CKPT --out grid.png``: image samples and top-half completions.
- ``zoo translate --checkpoint CKPT < source.txt``: translate text with an encoder-decoder model.
- ``zoo average RUN/checkpoints/every100 --last 5 --out averaged.ckpt``: checkpoint averaging.
- ``zoo list | pull | evaluate | export | push``: published checkpoints (:mod:`zoo.publishing.cli`).
- ``zoo models``: the registered models.
- ``zoo pattern NAME --out FILE.png``: draw an attention pattern of the catalogue (like Figure 3 of
  the Sparse Transformer paper).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import warnings
from pathlib import Path

import torch
from lightning.pytorch.cli import LightningCLI
from rich.console import Console
from rich.table import Table

from zoo.callbacks import quiet_lightning_warnings
from zoo.errors import ZooError, ZooWarning

__all__ = ["ZooCLI", "main"]

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

examples:
  zoo fit --config recipes/transformer_lm/pg19mini.yaml
  zoo generate --checkpoint transformer_lm_small.pg19mini --prompt "It was"
"""


# model arguments that --ckpt_path keeps from the command line (not the model itself)
CKPT_PATH_HONOURED = ("sampling",)

# Trainer settings where an int counts batches and a float is a fraction
INT_OR_FLOAT_TRAINER_ARGS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
    "val_check_interval",
)


class ZooCLI(LightningCLI):
    """LightningCLI with the zoo's defaults (precision by hardware and family, a training summary).

    Without ``--trainer.precision`` (on the command line or in the config), the precision is
    :func:`zoo.precision.default_precision` for the model's family, printed with the reason; an
    explicit precision that this CPU emulates trains, with one warning.

    With ``--ckpt_path`` LightningCLI rebuilds the model from the hyperparameters saved in the
    checkpoint, and those replace what the command line or the config asked for (Lightning issue
    #20801). We keep that behaviour but say which requested settings it dropped.
    """

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--run_dir",
            type=str | None,
            default=None,
            help="write the whole run here: sets trainer.default_root_dir, the logger's save_dir "
            "and every ModelCheckpoint's dirpath (RUN_DIR/checkpoints), e.g. to train a recipe "
            "again with --seed_everything 1 without overwriting the first run",
        )

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        self._keep_integer_limits(args)
        self._requested_model = self._model_init_args()  # before the checkpoint's hparams

    def _keep_integer_limits(self, args) -> None:
        """Integers given for the ``Trainer``'s int-or-float settings stay integers.

        ``typing`` caches unions up to the order of their members, so once anything (rich) has
        built ``Optional[Union[float, int]]``, the Trainer's ``Optional[Union[int, float]]`` is
        that object and jsonargparse tries float first: ``--trainer.limit_val_batches 1``
        became 1.0, i.e. 100% of the batches. The value as written (command line, then config
        files) decides here, and :meth:`instantiate_trainer` passes the integers on.
        """
        import yaml

        self._integer_limits: dict[str, int] = {}
        sub = self.config.get("subcommand")
        config = self.config.get(sub) if sub else self.config
        if config is None or config.get("trainer") is None:
            return
        args = list(args or [])
        for key in INT_OR_FLOAT_TRAINER_ARGS:
            flag, written = f"--trainer.{key}", None
            for i, arg in enumerate(args):
                if arg == flag and i + 1 < len(args):
                    written = args[i + 1]
                elif arg.startswith(flag + "="):
                    written = arg.split("=", 1)[1]
            if written is None:  # the last config file that sets it
                for path in [c for c in config.get("config") or [] if c is not None]:
                    try:
                        trainer = (yaml.safe_load(Path(str(path)).read_text()) or {}).get("trainer")
                    except (OSError, yaml.YAMLError, AttributeError):
                        continue
                    if isinstance(trainer, dict) and key in trainer:
                        written = str(trainer[key])
            value = config["trainer"].get(key)
            if written is not None and written.strip().isdigit() and isinstance(value, float):
                self._integer_limits[key] = int(value)

    def instantiate_trainer(self, **kwargs):
        """The Trainer, with the integer limits kept and, where a progress bar is shown and the
        config names none, :class:`~zoo.callbacks.StepProgressBar` (``Epoch 0``, ``step N/max``)."""
        from lightning.pytorch.callbacks import ProgressBar

        from zoo.callbacks import StepProgressBar

        kwargs = {**getattr(self, "_integer_limits", {}), **kwargs}
        trainer = self._get(self.config_init, "trainer", default={})
        callbacks = trainer.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        shown = trainer.get("enable_progress_bar") is not False
        if shown and not any(isinstance(c, ProgressBar) for c in callbacks):
            kwargs.setdefault("callbacks", [*callbacks, StepProgressBar()])
        return super().instantiate_trainer(**kwargs)

    def before_instantiate_classes(self) -> None:
        self._apply_run_dir()
        self._choose_precision()
        used = self._model_init_args()
        init_args = self._model_init_args(namespace=True)
        for key in CKPT_PATH_HONOURED:  # not part of the model: the command line's value wins
            if key in self._requested_model and init_args is not None:
                init_args[key] = used[key] = self._requested_model[key]
        dropped = {
            k: (v, used.get(k)) for k, v in self._requested_model.items() if used.get(k) != v
        }
        if dropped:
            lines = ", ".join(f"{k}={v!r} (checkpoint: {c!r})" for k, (v, c) in dropped.items())
            warnings.warn(
                f"--ckpt_path: the model is rebuilt from the checkpoint's hyperparameters, so "
                f"these model settings are ignored: {lines}. To use the weights with other "
                "settings, load them in a script (zoo.tasks.CausalLM.load_from_checkpoint).",
                stacklevel=1,
            )

    def _choose_precision(self) -> None:
        """Fill in ``trainer.precision`` by hardware and family where nothing names one; warn once
        where a named one is emulated on this CPU (:mod:`zoo.precision`)."""
        from zoo.models.registry import get_preset
        from zoo.precision import default_precision, slow_precision_warning

        config = self.config.get(self.config.get("subcommand") or "", self.config)
        trainer = config.get("trainer") if config is not None else None
        if trainer is None:
            return
        if trainer.get("precision") is not None:
            message = slow_precision_warning(trainer["precision"])
            if message is not None:
                print(f"zoo: warning: {message}", file=sys.stderr)
            return
        name = self._model_init_args().get("model")
        try:
            family = get_preset(name).family if isinstance(name, str) else None
        except Exception:  # an unknown name: the model's constructor says so, with suggestions
            family = None
        trainer["precision"], why = default_precision(family)
        print(f"zoo: precision {trainer['precision']}: {why} (set --trainer.precision to choose)",
              file=sys.stderr)  # fmt: skip

    def _apply_run_dir(self) -> None:
        """``--run_dir DIR`` moves every output of the run under DIR.

        A recipe names its run directory three times (``trainer.default_root_dir``, the logger's
        ``save_dir``, each ``ModelCheckpoint``'s ``dirpath``); one ``--trainer...`` override cannot
        reach the callbacks' list entries, so a second run would write its checkpoints into the
        first run's folder.
        """
        config = self.config.get(self.config.get("subcommand") or "", self.config)
        run_dir = config.get("run_dir") if config is not None else None
        if not run_dir or config.get("trainer") is None:
            return
        trainer = config["trainer"]
        trainer["default_root_dir"] = run_dir
        loggers = trainer.get("logger")
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            init_args = getattr(logger, "init_args", None)
            if init_args is not None and "save_dir" in init_args:
                init_args["save_dir"] = run_dir
        for callback in trainer.get("callbacks") or []:
            class_path = str(getattr(callback, "class_path", ""))
            init_args = getattr(callback, "init_args", None)
            if class_path.endswith("ModelCheckpoint") and init_args is not None:
                init_args["dirpath"] = str(Path(run_dir) / "checkpoints")

    def _model_init_args(self, namespace: bool = False):
        """The model's init_args as a dict (``namespace``: the config's Namespace, or None)."""
        config = self.config.get(self.config.get("subcommand") or "", self.config)
        model = config.get("model") if config is not None else None
        init_args = getattr(model, "init_args", None)
        if namespace:
            return init_args
        return dict(vars(init_args)) if init_args is not None else {}


def packaged_recipes() -> dict[str, Path]:
    """The recipes shipped inside the package: ``{"transformer_lm/pg19mini_v1": path}``."""
    import importlib.resources

    root = Path(str(importlib.resources.files("zoo").joinpath("recipes")))
    return {str(p.relative_to(root).with_suffix("")): p for p in sorted(root.glob("*/*.yaml"))}


def with_packaged_config(args: list[str]) -> list[str]:
    """``args`` with each ``--config`` value that is not a file replaced by the packaged recipe it
    names (``recipes/transformer_lm/pg19mini_v1.yaml`` or ``transformer_lm/pg19mini_v1``), so
    recipes work from an installed wheel as from a clone.

    Raises:
        ConfigError: neither a file nor a packaged recipe (close names suggested).
    """
    from zoo.config import suggest
    from zoo.errors import ConfigError

    out = list(args)
    for i, arg in enumerate(out):
        if arg in ("--config", "-c") and i + 1 < len(out):
            key, value, at = arg, out[i + 1], i + 1
        elif arg.startswith("--config="):
            key, value, at = "--config", arg.split("=", 1)[1], i
        else:
            continue
        inline = value.lstrip().startswith(("{", "[")) or "\n" in value or ": " in value
        if Path(value).is_file() or inline:  # a path, or a config given inline as YAML / JSON
            continue
        name = value.removeprefix("recipes/").removesuffix(".yaml")
        recipes = packaged_recipes()
        if name not in recipes:
            raise ConfigError(
                f"{key} {value}: no such file, and no packaged recipe of that name."
                f"{suggest(name, recipes)} Packaged recipes: {', '.join(recipes)}."
            )
        out[at] = str(recipes[name]) if at == i + 1 else f"--config={recipes[name]}"
    return out


def run_lightning(args: list[str]) -> None:
    from lightning import LightningDataModule, LightningModule

    import zoo  # noqa: F401  (registers the models)
    from zoo.callbacks import FinalLastCheckpoint, SampleWriter, TrainingSummary

    quiet_lightning_warnings()
    ZooCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=with_packaged_config(args),
        trainer_defaults={"callbacks": [TrainingSummary(), SampleWriter(), FinalLastCheckpoint()]},
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
    )


# what each task's checkpoints are, and the command that uses them
TASK_COMMANDS = {
    "CausalLM": "a language model: use `zoo generate`",
    "ImageLM": "an image model: use `zoo sample`",
    "Translation": "a translation model: use `zoo translate`",
}


def load_model(checkpoint: str, device: str = "cpu", task: str = "CausalLM"):
    """A model in eval mode from a Lightning ``.ckpt`` of ``zoo.tasks.<task>`` (``CausalLM``,
    ``ImageLM`` or ``Translation``) or anything :func:`zoo.from_pretrained` takes (published name,
    Hub repo id, pretrained directory).

    Raises:
        CheckpointError: a missing or unreadable ``.ckpt``, or a model of the wrong kind (a
            language model given to ``zoo translate``, or a translation model to ``zoo generate``).
    """
    from zoo import tasks
    from zoo.errors import CheckpointError
    from zoo.loading import checkpoint_task
    from zoo.pretrained import from_pretrained

    path = Path(checkpoint)
    if path.suffix != ".ckpt" or path.is_dir():
        model = from_pretrained(checkpoint, device=device)
    else:
        if not path.is_file():
            raise CheckpointError(f"{checkpoint} does not exist: pass a .ckpt file from `zoo fit`.")
        try:
            module = getattr(tasks, task).load_from_checkpoint(path, map_location=device)
        except Exception as e:
            saved = getattr(checkpoint_task(path), "__name__", None)
            if saved in TASK_COMMANDS and saved != task:
                raise CheckpointError(
                    f"{checkpoint} is a checkpoint of {saved}, {TASK_COMMANDS[saved]}."
                ) from None
            raise CheckpointError(
                f"could not load {checkpoint} as a {task} checkpoint ({type(e).__name__}: {e})"
            ) from None
        model = module.model.eval()
    seq2seq = getattr(model, "is_encoder_decoder", False)
    if seq2seq != (task == "Translation"):
        raise CheckpointError(
            f"{checkpoint} is {'a translation' if seq2seq else 'a language'} model: use "
            f"`zoo {'translate' if seq2seq else 'generate'}`."
        )
    return model


def checked_device(parser: argparse.ArgumentParser, device: str) -> str:
    """``device`` if this machine has it; else exit 2 with a one-line error naming what it has
    (:func:`zoo.pretrained.device_problem`)."""
    from zoo.pretrained import device_problem

    problem = device_problem(device, cpu="--device cpu")
    if problem is not None:
        parser.exit(2, f"{parser.prog}: error: --device {device!r} {problem}\n")
    return device


def prompt_bytes(text: str) -> bytes:
    """The bytes of a command-line argument as the user typed them: Python decodes arguments
    with ``surrogateescape``, so bytes that are not UTF-8 come back unchanged."""
    return os.fsencode(text)


def generate_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo generate", description="Sample text from a trained model."
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a .ckpt from `zoo fit`, a published checkpoint (`zoo list`), a Hub repo id or a "
        "save_pretrained directory",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", default="\n", help="text to continue (default: a newline); "
                        "any bytes, UTF-8 or not: the models are byte-level")  # fmt: skip
    source.add_argument("--prompt-file", help="continue the bytes of this file instead")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument(
        "--truncate-prompt",
        action="store_true",
        help="keep the last max_seq_len tokens of a long prompt instead of failing",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ns = parser.parse_args(args)

    from zoo.data.text import ByteTokenizer
    from zoo.generation import generate

    if ns.prompt_file is not None:
        if not Path(ns.prompt_file).is_file():
            parser.exit(2, f"zoo generate: error: --prompt-file {ns.prompt_file} does not exist\n")
        data = Path(ns.prompt_file).read_bytes()
    else:
        data = prompt_bytes(ns.prompt)
    if not data:
        parser.exit(2, "zoo generate: error: the prompt is empty: give at least one byte to "
                    "continue (the default prompt is a newline)\n")  # fmt: skip
    if ns.num_samples < 1 or ns.max_new_tokens < 0:
        parser.exit(2, "zoo generate: error: --num-samples must be >= 1 and --max-new-tokens "
                    f">= 0, got {ns.num_samples} and {ns.max_new_tokens}\n")  # fmt: skip
    checked_device(parser, ns.device)
    try:
        model = load_model(ns.checkpoint, ns.device)
    except ZooError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    tokenizer = ByteTokenizer()
    prompt = torch.tensor([list(data)] * ns.num_samples, device=ns.device)
    generator = torch.Generator(device=ns.device).manual_seed(ns.seed)
    try:
        out = generate(
            model,
            prompt,
            ns.max_new_tokens,
            temperature=ns.temperature,
            top_k=ns.top_k,
            top_p=ns.top_p,
            generator=generator,
            truncate_prompt=ns.truncate_prompt,
        )
    except ValueError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    for i, row in enumerate(out):
        if ns.num_samples > 1:
            print(f"--- sample {i} ---")
        print(tokenizer.decode(row))


def sample_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo sample",
        description="Sample images from an image model: unconditional samples, and completions of "
        "the top half of test images, written as PNG grids.",
    )
    parser.add_argument("--checkpoint", required=True, help="a .ckpt from `zoo fit` (ImageLM) or "
                        "anything zoo.from_pretrained takes")  # fmt: skip
    parser.add_argument("--out", required=True, help="PNG of the unconditional samples; the "
                        "completions go to <stem>_completions.png")  # fmt: skip
    parser.add_argument("--num-samples", type=int, default=8, help="unconditional samples")
    parser.add_argument("--completions", type=int, default=8, help="test images completed "
                        "(0: none); rows: top half given, completion, original")  # fmt: skip
    parser.add_argument("--dataset", default="cifar10", help="image shape and test images")
    parser.add_argument("--data-dir", help="directory with <dataset>/ (default $ZOO_DATA_DIR)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="samples and the test images chosen")
    parser.add_argument("--scale", type=int, default=2, help="pixels per image pixel in the PNG")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ns = parser.parse_args(args)

    import numpy as np

    from zoo.data.images import IMAGE_DATASETS, load_images, save_image_grid
    from zoo.generation import sample_images

    if ns.dataset not in IMAGE_DATASETS:
        parser.exit(2, f"zoo sample: error: --dataset must be one of {sorted(IMAGE_DATASETS)}\n")
    if ns.num_samples < 0 or ns.completions < 0 or ns.num_samples + ns.completions == 0:
        parser.exit(2, "zoo sample: error: --num-samples and --completions must be >= 0, and "
                    "one of them > 0\n")  # fmt: skip
    checked_device(parser, ns.device)
    shape = IMAGE_DATASETS[ns.dataset][0]
    model = load_model(ns.checkpoint, ns.device, task="ImageLM")
    generator = torch.Generator(ns.device).manual_seed(ns.seed)
    options = dict(temperature=ns.temperature, top_k=ns.top_k, generator=generator, progress=True)
    try:
        if ns.num_samples:
            samples = sample_images(model, shape, ns.num_samples, **options)
            print(f"wrote {save_image_grid(samples, ns.out, nrow=ns.num_samples, scale=ns.scale)}")
        if ns.completions:
            test = load_images(ns.dataset, data_dir=ns.data_dir, splits=("test",))["test"]
            chosen = np.sort(
                np.random.default_rng(ns.seed).choice(len(test), ns.completions, False)
            )
            originals = test[chosen]
            half = shape[0] // 2
            done = sample_images(model, shape, prompt_images=originals, prompt_rows=half, **options)
            given = originals.copy()
            given[:, half:] = 0
            grid = np.concatenate([given, done.numpy(), originals])
            path = Path(ns.out).with_name(Path(ns.out).stem + "_completions.png")
            print(f"wrote {save_image_grid(grid, path, nrow=ns.completions, scale=ns.scale)}")
    except ValueError as e:
        parser.exit(2, f"zoo sample: error: {e}\n")


def translate_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo translate",
        description="Translate text, one sentence per line, from stdin or --input to stdout or "
        "--output, with an encoder-decoder model (beam search as the Transformer paper).",
        epilog="Line N of the output is the translation of line N of the input; an empty or "
        "whitespace-only line translates to an empty line, without running the model (a model "
        "asked to translate nothing invents a sentence). The decoding flags left out resolve as "
        "zoo.translate() resolves them in Python: a published checkpoint's registered decoding, "
        "else beam 4, alpha 0.6, max length 1.0 * source + 50.",
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a .ckpt from `zoo fit` of a Translation recipe (or `zoo average`), a published "
        "checkpoint, a Hub repo id or a save_pretrained directory (with tokenizer.json)",
    )
    parser.add_argument("--input", help="a text file, one sentence per line (default: stdin)")
    parser.add_argument("--output", help="where to write the translations (default: stdout)")
    parser.add_argument("--decoding", choices=("beam", "greedy"),
                        help="default: a published checkpoint's (the decoding of its registered "
                        "test BLEU), else beam")  # fmt: skip
    parser.add_argument("--beam-size", type=int, help="default: the checkpoint's, else 4")
    parser.add_argument(
        "--alpha",
        type=float,
        help="GNMT length penalty exponent (default: the checkpoint's, else 0.6)",
    )
    parser.add_argument("--max-len-a", type=float, help="default: the checkpoint's, else 1.0")
    parser.add_argument(
        "--max-len-b",
        type=int,
        help="max length = a * source + b (default: the checkpoint's, else 50)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--attention-map",
        metavar="PNG",
        help="also draw the source x target attention of the first sentence into this PNG",
    )
    ns = parser.parse_args(args)

    from zoo.beam_search import check_decoding, decoding_settings, translate

    keys = ("decoding", "beam_size", "alpha", "max_len_a", "max_len_b")
    try:  # the flags given, at once: not after loading the model and reading stdin
        check_decoding(**{k: getattr(ns, k) for k in keys}, batch_size=ns.batch_size)
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    if ns.input is not None and not Path(ns.input).is_file():
        parser.exit(2, f"zoo translate: error: {ns.input} does not exist\n")
    checked_device(parser, ns.device)
    try:
        model = load_model(ns.checkpoint, ns.device, task="Translation")
    except ZooError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    # flags left out resolve as in zoo.translate(): the model's registered decoding, else the paper's
    settings = decoding_settings(model, **{k: getattr(ns, k) for k in keys})
    ns.decoding, ns.beam_size, ns.alpha, ns.max_len_a, ns.max_len_b = (settings[k] for k in keys)
    raw = Path(ns.input).read_bytes() if ns.input else _stdin_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        parser.exit(2, f"zoo translate: error: {ns.input or 'stdin'} is not UTF-8 text (byte "
                    f"0x{raw[e.start]:02x} on line {line}): the tokenizer takes UTF-8; convert it, "
                    "e.g. with iconv\n")  # fmt: skip
    sentences = text.splitlines()
    try:
        out = translate(
            model, sentences, decoding=ns.decoding, beam_size=ns.beam_size, alpha=ns.alpha,
            max_len_a=ns.max_len_a, max_len_b=ns.max_len_b, batch_size=ns.batch_size,
            progress=sys.stderr.isatty() or ns.input is not None,
        )  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    if ns.attention_map:
        _draw_attention_map(parser, model, sentences, ns)
    result = "".join(line + "\n" for line in out)
    if ns.output:
        Path(ns.output).write_text(result, encoding="utf-8")
    else:
        sys.stdout.write(result)


def _draw_attention_map(parser, model, sentences: list[str], ns) -> None:
    """``zoo translate --attention-map``: the first non-empty sentence's attention, drawn."""
    from zoo.beam_search import translate_with_attention
    from zoo.drawing import AttentionMap, draw_attention_maps

    first = next((s for s in sentences if s.strip()), None)
    if first is None:
        parser.exit(2, "zoo translate: error: --attention-map needs a non-empty sentence\n")
    try:
        text, weights, source, output = translate_with_attention(
            model, first, decoding=ns.decoding, beam_size=ns.beam_size, alpha=ns.alpha,
            max_len_a=ns.max_len_a, max_len_b=ns.max_len_b,
        )  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: --attention-map: {e}\n")
    mapping = getattr(model.config, "mapping", "softmax")
    path = draw_attention_maps(
        [AttentionMap(f"{type(model).__name__}, {mapping}", weights, source, output)],
        ns.attention_map, title=f"{first}\n-> {text}",
    )  # fmt: skip
    print(f"attention map of {first!r} written to {path}", file=sys.stderr)


def _stdin_bytes() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)  # a StringIO (tests) has no bytes underneath
    return buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8")


def average_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo average",
        description="Average the weights of the last N checkpoints of a run into one checkpoint "
        "(Vaswani et al. 2017, section 6.1).",
    )
    parser.add_argument(
        "sources", nargs="+", help="a directory of periodic checkpoints, or .ckpt files"
    )
    parser.add_argument(
        "--last", type=int, default=5, help="with a directory: how many (default 5)"
    )
    parser.add_argument("--out", required=True, help="the .ckpt to write")
    ns = parser.parse_args(args)

    from zoo.averaging import last_checkpoints, save_average

    if len(ns.sources) == 1 and Path(ns.sources[0]).is_dir():
        paths = last_checkpoints(ns.sources[0], ns.last)
    else:
        paths = [Path(s) for s in ns.sources]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            parser.exit(2, f"zoo average: error: not found: {', '.join(missing)}\n")
    out = save_average(paths, ns.out, progress=True)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {out}")


def models_main(args: list[str]) -> None:
    from zoo.models.registry import get_preset, list_models

    table = Table(title="registered models")
    table.add_column("name", no_wrap=True)
    table.add_column("family")
    table.add_column("parameters", justify="right")
    table.add_column("description")
    for name in list_models(args[0] if args else None):
        preset = get_preset(name)
        with torch.device("meta"):  # count without allocating
            n = sum(p.numel() for p in preset.model_cls(preset.config).parameters())
        table.add_row(name, preset.family, f"{n / 1e6:.2f}M", preset.description)
    Console().print(table)


def pattern_main(args: list[str]) -> None:
    from zoo.attention.patterns import PATTERNS
    from zoo.drawing import draw_pattern

    parser = argparse.ArgumentParser(
        prog="zoo pattern",
        description="Draw an attention pattern: its connectivity matrix (blocks shaded) and the "
        "keys one query attends to, to PNG.",
    )
    parser.add_argument("name", choices=sorted(PATTERNS))
    parser.add_argument("--out", required=True, help="the PNG file to write")
    parser.add_argument("--n", type=int, default=64, help="sequence length drawn")
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--stride", type=int, help="strided / fixed: l")
    parser.add_argument("--c", type=int, help="fixed: summary cells per block")
    parser.add_argument("--distinct-summaries", action="store_true", help="fixed: per-head")
    parser.add_argument("--window", type=int, help="local: positions attended")
    parser.add_argument("--query-block", type=int, help="local_1d: positions per query block")
    parser.add_argument("--memory", type=int, help="local_1d: positions before the block")
    parser.add_argument("--width", type=int, help="local_2d: grid width (3 x pixels for RGB)")
    parser.add_argument("--query-height", type=int, help="local_2d: query block rows")
    parser.add_argument("--query-width", type=int, help="local_2d: query block columns")
    parser.add_argument("--memory-height", type=int, help="local_2d: memory rows above")
    parser.add_argument("--memory-width", type=int, help="local_2d: memory columns each side")
    parser.add_argument("--component", type=int, choices=(1, 2), help="A1 or A2 alone")
    parser.add_argument("--query", type=int, help="the query shown on the right (default: last)")
    parser.add_argument("--head", type=int, default=0, help="head drawn (distinct summaries)")
    ns = parser.parse_args(args)
    keys = ("stride", "c", "window", "component", "query_block", "memory", "width",
            "query_height", "query_width", "memory_height", "memory_width")  # fmt: skip
    params = {k: getattr(ns, k) for k in keys if getattr(ns, k) is not None}
    if ns.distinct_summaries:
        params["distinct_summaries"] = True
    path = draw_pattern(
        ns.name, ns.out, n=ns.n, block_size=ns.block_size, query=ns.query, head=ns.head, **params
    )
    print(f"wrote {path}")


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
    elsewhere exits 130 without a traceback.
    """
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from zoo.callbacks import resume_hint

    try:
        with _one_line_zoo_warnings():
            _main(list(sys.argv[1:] if argv is None else argv))
    except SIGTERMException:  # a SystemExit with status 0: the run did not finish
        print(f"zoo: stopped by SIGTERM; {resume_hint()}", file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)
    except SystemExit as e:  # Lightning ends a fit stopped by Ctrl-C with sys.exit(1)
        if e.code != 1 or not isinstance(e.__context__, KeyboardInterrupt):
            raise
        print(f"zoo: stopped by Ctrl-C (SIGINT); {resume_hint()}", file=sys.stderr)
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


@contextlib.contextmanager
def _one_line_zoo_warnings():
    """Show the zoo's own warnings (:class:`~zoo.errors.ZooWarning`: a retired checkpoint) as one
    line each on stderr, ``zoo: warning: MESSAGE``; others as Python shows them. Python's filters
    still apply first, so a warning repeated from the same line shows once."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ZooWarning):
            print(f"zoo: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


COMMANDS = {  # command -> (module, function taking the remaining arguments), imported when run
    "generate": ("zoo.cli", "generate_main"),
    "sample": ("zoo.cli", "sample_main"),
    "translate": ("zoo.cli", "translate_main"),
    "average": ("zoo.cli", "average_main"),
    "models": ("zoo.cli", "models_main"),
    "pattern": ("zoo.cli", "pattern_main"),
    "list": ("zoo.publishing.cli", "list_main"),
    "pull": ("zoo.publishing.cli", "pull_main"),
    "evaluate": ("zoo.publishing.cli", "evaluate_main"),
    "export": ("zoo.publishing.cli", "export_main"),
    "push": ("zoo.publishing.cli", "push_main"),
    "bench": ("zoo.bench", "bench_main"),
    "verify": ("zoo.golden", "verify_main"),
}
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _main(args: list[str]) -> None:
    import importlib

    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return
    command, rest = args[0], args[1:]
    if command in LIGHTNING_COMMANDS:
        run_lightning(args)
    elif command in COMMANDS:
        module, function = COMMANDS[command]
        getattr(importlib.import_module(module), function)(rest)
    else:
        sys.exit(f"zoo: unknown command {command!r}\n\n{USAGE}")


if __name__ == "__main__":
    main()
