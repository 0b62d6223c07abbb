"""lm-evaluation-harness scores zoo models (zoo.integrations.lm_eval_harness): a local JSON task's
rolling bits per byte is `zoo evaluate`'s on the same pg19mini bytes plus the first byte,
log-likelihoods and greedy answers equal the model's own, and bad input ends in one line. A tiny
model keeps it fast; docs/checkpoints.md has the published model's figures."""

from __future__ import annotations

import json
import math

import lm_eval  # the lm-eval extra, which `make setup` installs
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from zoo.errors import ConfigError
from zoo.integrations.lm_eval_harness import ZooLM, main

WINDOWS = 64  # of the tiny model's 128 bytes: 8,192 scored bytes


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """A tiny byte model with random weights, scaled up so that its predictions depend strongly
    on the context (every code path, at a fraction of a trained model's time)."""
    import zoo

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny")
    model = zoo.create_model("transformer_lm_tiny").eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def lm(folder) -> ZooLM:
    return ZooLM(pretrained=folder, batch_size="4")


def _request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def _task(folder, text: str) -> TaskManager:
    (folder / "slice.jsonl").write_text(json.dumps({"text": text}) + "\n")
    (folder / "zoo_slice.yaml").write_text(
        "task: zoo_slice\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'slice.jsonl'}\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: bits_per_byte\n"
    )
    return TaskManager(include_path=str(folder), include_defaults=False)  # skip indexing ~10k tasks


def _utf8_slice(docs, n: int) -> bytes:
    """``n`` bytes from the start of a line of the first document that decodes as UTF-8 (pg19mini
    also has Windows-1252 bytes, which a harness string cannot carry)."""
    for doc in docs:
        start = bytes(doc).index(b"\n") + 1
        try:
            return bytes(doc[start : start + n]).decode("utf-8").encode()
        except UnicodeDecodeError:
            continue
    raise AssertionError("no UTF-8 document")


def test_rolling_bits_per_byte_equal_zoo_evaluate(lm, folder, data_dir, tmp_path):
    from zoo.data import ByteTextDataModule
    from zoo.evaluation import evaluate

    dm = ByteTextDataModule(dataset="pg19mini", seq_len=128)
    dm.setup("test")
    piece = _utf8_slice(dm.splits["test"], WINDOWS * 128 + 1)
    # `zoo evaluate --text-file` scores the file's last 5 %: make that the slice
    book = tmp_path / "book.txt"
    book.write_bytes(b"x" * (19 * len(piece)) + piece)
    scored = ByteTextDataModule(dataset="text_file", path=str(book), seq_len=128)
    scored.setup("test")
    raw = bytes(scored.splits["test"][0])  # the very bytes zoo evaluate scores
    zoo_metric = evaluate(folder, text_file=book, split="test", progress=False)
    assert zoo_metric.targets == len(raw) - 1 >= WINDOWS * 128
    text = raw.decode("utf-8")

    out = lm_eval.simple_evaluate(model=lm, tasks=["zoo_slice"], task_manager=_task(tmp_path, text))
    harness = out["results"]["zoo_slice"]["bits_per_byte,none"]
    # exactly: the harness's sum is zoo's plus the first byte's bits, over every byte
    with torch.no_grad():
        first = lm.model(torch.tensor([[ord("\n")]])).logits.log_softmax(-1)[0, -1, raw[0]]
    expected = (zoo_metric.value * zoo_metric.targets - float(first) / math.log(2)) / len(raw)
    assert harness == pytest.approx(expected, abs=2e-5)  # zoo's value is rounded to 5 decimals
    assert (
        abs(zoo_metric.value - 8.0) > 1.0
    )  # far from uniform: other windows would score otherwise


def test_loglikelihood_is_the_models_own(lm):
    context, continuation = "It was the best of times, it was the", " worst of times"
    ((logp, greedy),) = lm.loglikelihood([_request("loglikelihood", context, continuation)])
    ids = torch.tensor([list((context + continuation).encode())])
    with torch.no_grad():
        logits = lm.model(ids[:, :-1]).logits.log_softmax(-1)[0]
    n = len(continuation)
    targets = ids[0, -n:]
    assert logp == pytest.approx(float(logits[-n:].gather(-1, targets[:, None]).sum()), abs=1e-4)
    assert greedy == bool((logits[-n:].argmax(-1) == targets).all())
    # a context past the model's window is cut on the left: only its last bytes matter
    long = "x" * 1000 + context
    ((logp_long, _),) = lm.loglikelihood([_request("loglikelihood", long, continuation)])
    ((logp_cut, _),) = lm.loglikelihood(
        [_request("loglikelihood", long[-(lm.context + 1 - n) :], continuation)]
    )
    assert logp_long == logp_cut


def test_batches_do_not_change_scores(lm):
    pairs = [("The cat", " sat"), ("On the", " mat"), ("A much longer context here", " and"),
             ("The dog", " ran")]  # fmt: skip
    together = lm.loglikelihood([_request("loglikelihood", *p) for p in pairs])
    alone = [lm.loglikelihood([_request("loglikelihood", *p)])[0] for p in pairs]
    for (a, ga), (b, gb) in zip(together, alone, strict=True):
        assert a == pytest.approx(b, abs=1e-5) and ga == gb


def test_generate_until_is_greedy_zoo_generate_cut_at_stop(lm):
    from zoo.generation import generate

    prompt = "Chapter I.\n\nIt was"
    ids = generate(lm.model, torch.tensor([list(prompt.encode())]), 40, temperature=0.0)
    full = bytes(ids[0, -40:].tolist()).decode("utf-8", errors="replace")
    stop = full[5:7]
    (answer,) = lm.generate_until(
        [_request("generate_until", prompt, {"until": [stop], "max_gen_toks": 40})]
    )
    assert answer == full[: full.find(stop)] and len(answer) < 40


def test_bad_input_is_one_line(folder, capsys, monkeypatch):
    with pytest.raises(ConfigError, match="not a byte-level text model"):
        ZooLM(pretrained="transformer_small.multi30k")
    with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
        ZooLM(pretrained=folder, batch_size="many")
    with pytest.raises(ConfigError, match="longer than the model's context of 128 bytes"):
        ZooLM(pretrained=folder).loglikelihood([_request("loglikelihood", "a", "b" * 300)])
    # the CLI wrapper: the harness builds the model from --model_args; a zoo error is one line
    import lm_eval.__main__

    def harness_cli():
        ZooLM.create_from_arg_string("pretrained=no_such_model", {"device": "cpu"})

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", harness_cli)
    code = main(["--model", "zoo", "--model_args", "pretrained=no_such_model"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("zoo: ") and "no_such_model" in err[-1]
