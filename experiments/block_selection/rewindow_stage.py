"""Let a training stage go on with longer windows: rewrite the window schedule a Lightning
checkpoint of ``zoo.data.ByteTextDataModule`` records, so that a resumed run trains on
``--seq-len`` windows from the stage's step on.

A resumed run refuses a checkpoint whose recorded schedule differs from its recipe's (the
datamodule's ``load_state_dict``). After a stage of ``S`` steps on windows of ``L`` bytes, the
recipe's ``seq_len_warmup_steps: S``, ``seq_len_warmup_start: L`` and
``seq_len_warmup_doubling: false`` describe those steps, and ``seq_len`` / ``batch_size`` the
rest (same bytes per step); this script writes that schedule into the stage, which is then
resumed with ``zoo fit --config RECIPE --ckpt_path OUT``. The weights, optimizer and step are
untouched. The checkpoint is read as data (``weights_only=True``).

    python experiments/block_selection/rewindow_stage.py STAGE.ckpt OUT.ckpt \
        --seq-len 4096 --batch-size 2 --eval-batch-size 1
"""

from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", help="a Lightning checkpoint of a ByteTextDataModule run")
    parser.add_argument("out", help="where to write the rewritten checkpoint")
    parser.add_argument("--seq-len", type=int, required=True, help="the new window length")
    parser.add_argument("--batch-size", type=int, required=True, help="windows per step after")
    parser.add_argument("--eval-batch-size", type=int, required=True)
    args = parser.parse_args(argv)
    state = torch.load(args.stage, map_location="cpu", weights_only=True)
    old = state.get("ByteTextDataModule")
    if old is None or old.get("seq_len_warmup_steps"):
        parser.error(f"{args.stage}: not a ByteTextDataModule run on one window length ({old})")
    bytes_per_step = old["seq_len"] * state["datamodule_hyper_parameters"]["batch_size"]
    if args.seq_len * args.batch_size != bytes_per_step:
        parser.error(f"--seq-len x --batch-size must keep the {bytes_per_step} bytes per step")
    schedule = {
        "seq_len": args.seq_len,
        "seq_len_warmup_steps": state["global_step"],
        "seq_len_warmup_start": old["seq_len"],
        "seq_len_warmup_doubling": False,
    }
    state["ByteTextDataModule"] = dict(schedule)
    state["datamodule_hyper_parameters"].update(
        schedule, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size
    )
    torch.save(state, args.out)
    print(f"{args.out}: step {state['global_step']}, {old['seq_len']}-byte windows so far, "
          f"{args.seq_len} from here on")  # fmt: skip


if __name__ == "__main__":
    main()
