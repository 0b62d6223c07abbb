"""The copy probe on published checkpoints (issue 53, item 1): `zoo export --copy-probe DIR`
publishes copy_probe.md/.json/.png and the card shows them (only then); the registry's `copy_gain`
metric round-trips through checkpoints.yaml and its schema; `zoo evaluate NAME --registered`
re-measures it (alone with `--metric copy_gain`) at the registered distance, the same value as
that distance of the whole curve."""

import dataclasses

import pytest
import yaml
from fakes import fake_run, pg19mini_test_books
from published import METRIC, NAME, REPO

from zoo.cli import main
from zoo.errors import RegistryError
from zoo.evaluation import evaluate
from zoo.hub import Metric, load_registry
from zoo.probes import copy_gain, copy_probe, gain_metric, save_copy_probe
from zoo.publishing import export_run, register

RECIPE = "recipes/transformer_lm/pg19mini.yaml"
SECTION = "## Retrieval at a distance (copy probe)"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A data directory whose pg19mini test books are three short word salads."""
    return str(pg19mini_test_books(tmp_path_factory.mktemp("data"), (900, 700, 500)))


def test_the_card_shows_the_copy_probe_only_when_its_files_are_given(registry, corpus, tmp_path,
                                                                     capsys):  # fmt: skip
    run = fake_run(tmp_path / "run")
    plain = export_run(run, tmp_path / "plain", name=NAME, recipe=REPO / RECIPE, metrics=[METRIC])
    assert SECTION not in (plain / "README.md").read_text()
    assert not any(plain.glob("copy_probe.*"))
    assert "copy_probe.json" not in register(plain, name=NAME, recipe=RECIPE,
                                             metrics=[METRIC]).files  # fmt: skip

    probe = copy_probe(run, trials=4, data_dir=corpus, progress=False)
    save_copy_probe(dataclasses.replace(probe, source=NAME), tmp_path / "probe")
    gain = gain_metric(probe, probe.distances[-1], hardware="test CPU", date="2026-11-28")
    results = tmp_path / "results.json"
    from zoo.evaluation import save_metric

    for m in (METRIC, gain):
        save_metric(m, results)
    folder = registry.shipped_dir / NAME
    main(["export", str(run), "--name", NAME, "--recipe", str(REPO / RECIPE), "--results",
          str(results), "--out", str(folder), "--copy-probe", str(tmp_path / "probe")])  # fmt: skip
    card = (folder / "README.md").read_text()
    assert SECTION in card and "![retrieval gain by distance (copy probe)](copy_probe.png)" in card
    assert f"Measured with `zoo evaluate {NAME} --probe copy --trials 4`" in card
    assert "about 0 means it does not copy from that far back" in card
    d = probe.distances[-1]
    assert (
        f"| {d:,} | {probe.repeat[-1]:.4f} | {probe.control:.4f} | {probe.gain[-1]:+.4f} |" in card
    )
    assert f"The registered `copy_gain` (Results) is the gain at d = {d:,}" in card
    assert (
        f"| copy gain (bits/byte) | pg19mini | test | 4 trials of the copy probe at d = {d:,}"
        in card
    )
    assert "copy gain (bits/byte): higher is better" in card
    entry = register(folder, name=NAME, recipe=RECIPE, metrics=[METRIC, gain])
    assert {"copy_probe.md", "copy_probe.json", "copy_probe.png"} <= set(entry.files)


def test_a_copy_gain_round_trips_through_the_registry_and_its_schema(published):
    gain = Metric("copy_gain", -0.0123, "pg19mini", "test", 32, 768, "32-true", context=256,
                  hardware="AMD EPYC (2 threads)", date="2026-11-28",
                  probe={"distance": 128, "span": 32, "cue": 8, "seed": 0})  # fmt: skip
    register(published, name=NAME, recipe=RECIPE, metrics=[METRIC, gain])
    registry = load_registry()
    entry = registry.get(NAME)
    assert entry.metrics == (METRIC, gain)
    assert entry.headline == METRIC and entry.whole_split("test") is None  # never the headline
    assert gain.kind.heading == "copy gain (bits/byte)" and not gain.kind.lower_is_better
    assert gain.label == (
        "pg19mini test (32 trials of the copy probe at d = 128, span 32, cue 8, seed 0, 768 bytes)"
    )
    text = registry.path.read_text()
    for _why, edit in (
        ("no probe", lambda m: m.pop("probe")),
        ("no distance", lambda m: m["probe"].pop("distance")),
        ("an unknown setting", lambda m: m["probe"].update(stride=4)),
        ("a probe on bits/byte", lambda m: m.update(name="bits_per_byte")),
    ):
        data = yaml.safe_load(text)
        edit(data["checkpoints"][NAME]["metrics"][1])
        registry.path.write_text(yaml.safe_dump(data))
        with pytest.raises(RegistryError, match=f"checkpoints.{NAME}.metrics.1"):
            load_registry()
    registry.path.write_text(text)
    assert load_registry().get(NAME).metrics == (METRIC, gain)


def test_registered_re_measures_the_copy_gain(published, corpus, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the rich table on one line per row
    curve = copy_probe(NAME, trials=4, data_dir=corpus, progress=False)
    d = curve.distances[-1]
    gain = copy_gain(NAME, distance=d, trials=4, data_dir=corpus, progress=False)
    # the windows do not depend on the distances: the gain alone is the curve's at d
    assert gain.value == curve.gain[-1] and gain.probe["distance"] == d and gain.windows == 4
    assert gain.targets == 4 * (32 - 8) and gain.hardware and gain.date
    whole = evaluate(NAME, data_dir=corpus, windows=1, progress=False)
    register(published, name=NAME, recipe=RECIPE, metrics=[whole, gain])

    main(["evaluate", NAME, "--registered", "--data-dir", corpus])
    out = capsys.readouterr().out
    assert out.count("+0.0000") == 2 and "copy gain (bits/byte)" in out

    seen = []
    monkeypatch.setattr("zoo.evaluation.evaluate", lambda *a, **k: seen.append(a))
    main(["evaluate", NAME, "--registered", "--metric", "copy_gain", "--data-dir", corpus])
    out = capsys.readouterr().out
    assert not seen and out.count("+0.0000") == 1 and f"d = {d:,}" in out  # copy_gain alone

    off = dataclasses.replace(gain, value=round(gain.value + 0.01, 5))
    register(published, name=NAME, recipe=RECIPE, metrics=[whole, off])
    with pytest.raises(SystemExit) as e:
        main(["evaluate", NAME, "--registered", "--metric", "copy_gain", "--data-dir", corpus])
    assert "copy_gain on pg19mini test" in str(e.value.code) and "-0.0100" in str(e.value.code)


def test_metric_goes_with_registered_and_names_a_registered_metric(published, capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", NAME, "--metric", "copy_gain"])
    assert e.value.code == 2 and "--metric goes with --registered" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the tiny checkpoint registers bits/byte only
        main(["evaluate", NAME, "--registered", "--metric", "copy_gain"])
    assert "registers no copy_gain metric (it has bits_per_byte)" in str(e.value.code)
