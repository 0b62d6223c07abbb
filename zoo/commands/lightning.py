"""``zoo fit | validate | test | predict``: LightningCLI (jsonargparse) over the zoo's tasks and
data modules; recipes are files or the packaged ones by name. Their ``--help`` leads with the
zoo's options (:data:`ZOO_OPTIONS`), the Trainer's flags last (:class:`ZooArgumentParser`)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from zoo.callbacks import quiet_lightning_warnings
from zoo.errors import ConfigError

__all__ = [
    "ZOO_OPTIONS",
    "ZooArgumentParser",
    "ZooCLI",
    "packaged_recipes",
    "parser_kwargs",
    "run_lightning",
    "with_packaged_config",
]

SUMMARIES = {  # what each command does, the first line of its --help
    "fit": "Train a model of the zoo with Lightning (Trainer.fit).",
    "validate": "Measure a model on the validation split (Trainer.validate).",
    "test": "Measure a model on the test split (Trainer.test).",
    "predict": "Sample continuations of --data.init_args.prompts (Trainer.predict).",
}

ZOO_OPTIONS = """\
A recipe, then any setting as a flag or a YAML key. The zoo's options:
  -c, --config RECIPE       a YAML file or a packaged recipe's name
                            (transformer_lm/pg19mini, a published checkpoint's)
  --model TASK              CausalLM, ImageLM or Translation (zoo.tasks)
  --model.help TASK         the task's settings: --model.init_args.NAME VALUE
  --data DATAMODULE         ByteTextDataModule, ImageDataModule,
                            TranslationDataModule, LongRangeTaskDataModule
  --data.help DATAMODULE    its settings: --data.init_args.NAME VALUE
  --run_dir DIR             write the whole run (logs, checkpoints) under DIR
  --ckpt_path CKPT          the checkpoint to resume (fit) or to use
  --allow_class_path PREFIX trust the classes under PREFIX that a recipe
                            names (repeatable; docs/security.md)
  --print_config            print the resolved recipe and exit
The Trainer's settings (--trainer.NAME VALUE) come last. `zoo models` lists
the models a task builds (--model.init_args.model NAME).

examples:
  zoo fit --config transformer_lm/pg19mini --trainer.max_steps 100
  zoo fit --model.help CausalLM
  zoo test --config transformer_lm/pg19mini --ckpt_path best.ckpt
"""

GROUP_TITLES = {  # the argument groups that LightningCLI titles with a class or a docstring
    "model": "The task (--model TASK; --model.help TASK for its settings)",
    "data": "The data (--data DATAMODULE; --data.help DATAMODULE for its settings)",
    "trainer": "The Trainer's settings (--trainer.NAME VALUE)",
}


def _usage(command: str) -> str:
    indent = " " * len(f"usage: zoo {command} ")
    return (f"zoo {command} [--config RECIPE] [--model TASK] [--data DATAMODULE]\n"
            f"{indent}[--run_dir DIR] [--ckpt_path CKPT] [--print_config]\n"
            f"{indent}[--allow_class_path PREFIX] [--model.NAME VALUE]\n"
            f"{indent}[--data.NAME VALUE] [--trainer.NAME VALUE] ...")  # fmt: skip


class _KeptLinesFormatter(DefaultHelpFormatter):
    """jsonargparse's help, with the description's lines kept as written (a table of options)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


class ZooArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose ``--help`` shows the Trainer's flags after everything else: the
    zoo's options, the task (``--model``) and the data (``--data``) come first."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _KeptLinesFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self, *args, **kwargs) -> str:
        groups = self._action_groups
        for group in groups:
            key = _group_key(group)
            group.title = GROUP_TITLES.get(key, group.title)
        trainer = [g for g in groups if _group_key(g) == "trainer"]
        self._action_groups = [g for g in groups if g not in trainer] + trainer
        try:
            return super().format_help(*args, **kwargs)
        finally:
            self._action_groups = groups


def _group_key(group) -> str | None:
    """``model``, ``data`` or ``trainer`` for the argument group of that key (the one that holds
    ``--model`` itself, not a class's settings shown by ``--model.help``), else ``None``."""
    dests = {a.dest for a in group._group_actions}
    return next((key for key in GROUP_TITLES if key in dests), None)


def parser_kwargs() -> dict[str, dict[str, str]]:
    """LightningCLI's ``parser_kwargs``: each command's usage and description (:data:`ZOO_OPTIONS`)."""
    return {command: {"usage": _usage(command), "description": f"{summary}\n\n{ZOO_OPTIONS}"}
            for command, summary in SUMMARIES.items()}  # fmt: skip


# model arguments that --ckpt_path keeps from the command line (not the model itself; a file's
# `compile: true` starts no compiler)
CKPT_PATH_HONOURED = ("sampling", "compile")


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

    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path``: the checkpoint's hyper-parameters replace the model's settings, as in
        Lightning, but read as data (:mod:`zoo.tasks.checkpoint`): only a zoo task, only keys it
        takes, plain values, and no ``init_from`` that the file chose itself; Lightning's
        ``_instantiator`` and ``_class_path`` are not followed."""
        from zoo.tasks.checkpoint import (
            checked_hyperparameters,
            read_checkpoint,
            rebuild_arguments,
            saved_task,
        )

        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        if not path or not Path(path).is_file():
            return
        ckpt = read_checkpoint(path)
        task = saved_task(ckpt, path)
        if task is None:
            return
        hp = checked_hyperparameters(task, ckpt.get("hyper_parameters"), path)
        self._saved_hparams = hp  # restored on the task once built: the lineage as saved
        model = {"class_path": f"zoo.tasks.{task.__name__}",
                 "init_args": rebuild_arguments(task, hp, ckpt, path)}  # fmt: skip
        self.config = self.parser.parse_object({sub: {"model": model}}, self.config)

    def after_instantiate_classes(self) -> None:
        saved = getattr(self, "_saved_hparams", None)
        if saved is not None and hasattr(self.model, "hparams"):
            self.model.hparams.update(saved)
        super().after_instantiate_classes()

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
        config names none, :class:`~zoo.callbacks.StepProgressBar` (``Epoch 0``, ``step N/max``).

        Raises:
            ConfigError: a value the Trainer refuses (Lightning's ``MisconfigurationException``,
                e.g. ``--trainer.max_time 00:00:8:00``), in one line.
        """
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.callbacks import ProgressBar

        from zoo.callbacks import StepProgressBar

        kwargs = {**getattr(self, "_integer_limits", {}), **kwargs}
        trainer = self._get(self.config_init, "trainer", default={})
        callbacks = trainer.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        shown = trainer.get("enable_progress_bar") is not False
        if shown and not any(isinstance(c, ProgressBar) for c in callbacks):
            kwargs.setdefault("callbacks", [*callbacks, StepProgressBar()])
        try:
            return super().instantiate_trainer(**kwargs)
        except MisconfigurationException as e:
            raise ConfigError(f"the trainer settings: {e}") from e

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
    """The recipes shipped inside the package: ``{"transformer_lm/pg19mini": path}``; a published
    checkpoint's recipe is named after it (``"transformer_lm/transformer_lm_small.pg19mini"``)."""
    import importlib.resources

    root = Path(str(importlib.resources.files("zoo").joinpath("recipes")))
    return {str(p.relative_to(root).with_suffix("")): p for p in sorted(root.glob("*/*.yaml"))}


def with_packaged_config(args: list[str]) -> list[str]:
    """``args`` with each ``--config`` value that is not a file replaced by the packaged recipe it
    names (``recipes/transformer_lm/pg19mini.yaml``, ``transformer_lm/pg19mini``, or a published
    checkpoint's name alone: ``transformer_lm_small.pg19mini``), so recipes work from an installed
    wheel as from a clone.

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
        # a published checkpoint's recipe also by the checkpoint's name (names with a dot)
        recipes |= {Path(k).name: p for k, p in list(recipes.items()) if "." in Path(k).name}
        if name not in recipes:
            raise ConfigError(
                f"{key} {value}: no such file, and no packaged recipe of that name."
                f"{suggest(name, recipes)} Packaged recipes: {', '.join(recipes)}."
            )
        out[at] = str(recipes[name]) if at == i + 1 else f"--config={recipes[name]}"
    return out


def run_lightning(args: list[str]) -> None:
    """``zoo fit | validate | test | predict ARGS`` (``args[0]`` is the command).

    Raises:
        ConfigError: a recipe or flag that names a class the zoo does not trust
            (:func:`~zoo.commands.class_paths.check_class_paths`), a missing recipe, or a value the
            Trainer refuses; jsonargparse exits 2 with its message on other bad input.
    """
    from lightning import LightningDataModule, LightningModule

    if args[1:] not in (["--help"], ["-h"]):  # the help alone names them without importing them
        # the tasks and data modules, imported: --model CausalLM and --model.help CausalLM find them
        import zoo.data  # noqa: F401
        import zoo.tasks  # noqa: F401
    from zoo.callbacks import FinalLastCheckpoint, SampleWriter, TrainingSummary
    from zoo.commands.class_paths import check_class_paths, split_allowances

    quiet_lightning_warnings()
    args, allowed = split_allowances(args)
    args = with_packaged_config(args)
    check_class_paths(args, allowed)  # before jsonargparse imports any class a recipe names
    ZooCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        trainer_defaults={"callbacks": [TrainingSummary(), SampleWriter(), FinalLastCheckpoint()]},
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        parser_class=ZooArgumentParser,
        parser_kwargs=parser_kwargs(),
    )
