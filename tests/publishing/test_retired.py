"""Retired checkpoints (issue 53, item 4): the registry's optional ``retired`` field (schema, and a
``use_instead`` that exists and is active), `zoo list` hiding them (``--all`` shows them marked ‡,
``--json`` lists every entry with its ``retired`` field, the README's table names them in one line),
and loading one by name: the same verified weights, with one warning saying what to use instead."""

import copy
import json
import shutil
import warnings

import pytest
import yaml
from published import NAME

import zoo
from zoo.cli import main
from zoo.commands.listing import markdown_table
from zoo.errors import RegistryError, RetiredCheckpointWarning
from zoo.hub import load_registry
from zoo.hub.registry import Registry
from zoo.hub.schema import Retirement

OLD = "transformer_lm_tiny.pg19mini_v0"  # a copy of the tiny checkpoint, retired in its favour
RETIRED = {"reason": "loses to transformer_lm_tiny.pg19mini (7.95 against 7.90 bits/byte)",
           "use_instead": NAME, "date": "2026-11-28"}  # fmt: skip
WARNING = f"{OLD} is retired ({RETIRED['reason']}); use {NAME}"


def edit_registry(path, edit) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data["checkpoints"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
def retired(published, registry):
    """The tiny checkpoint registered twice: ``NAME`` active, ``OLD`` (the same files) retired."""
    shutil.copytree(published, registry.shipped_dir / OLD)

    def add(entries):
        entries[OLD] = copy.deepcopy(entries[NAME]) | {"retired": dict(RETIRED)}

    edit_registry(registry.path, add)
    return load_registry()


def test_a_retirement_round_trips_through_the_registry(retired):
    assert retired.get(OLD).retired == Retirement(**RETIRED)
    assert retired.get(NAME).retired is None
    assert retired.get(OLD).retired.message(OLD) == WARNING
    retired.save()  # what `zoo export --register` and `zoo push --update-registry` write
    again = load_registry()
    assert again.get(OLD) == retired.get(OLD) and again.get(NAME) == retired.get(NAME)
    assert "retired" not in yaml.safe_load(again.path.read_text())["checkpoints"][NAME]
    Registry(again.path, again.entries).save()
    assert load_registry().path.read_text() == again.path.read_text()  # a fixed point


def test_refreshing_a_retired_checkpoints_card_keeps_it_retired(retired):
    """Re-registering a folder (`zoo export --register`, refresh_card) replaces its files and
    metadata, not the registry's decision to retire it."""
    from zoo.publishing import refresh_card

    entry = refresh_card(OLD, retired)
    assert entry.retired == Retirement(**RETIRED) == load_registry().get(OLD).retired
    assert load_registry().get(NAME).retired is None


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda r: r.pop("reason"), "'reason' is a required property"),
        (lambda r: r.pop("use_instead"), "'use_instead' is a required property"),
        (lambda r: r.pop("date"), "'date' is a required property"),
        (lambda r: r.update(by="someone"), "'by' was unexpected"),
        (lambda r: r.update(reason="two\nlines"), "retired.reason"),
        (lambda r: r.update(reason=3), "retired.reason: 3 is not of type 'string'"),
        (lambda r: r.update(date="28 November 2026"), "retired.date"),
        (lambda r: r.update(use_instead="not a name"), "retired.use_instead"),
    ],
)
def test_the_schema_refuses_a_wrong_key_or_type_naming_the_entry(retired, edit, what):
    edit_registry(retired.path, lambda entries: edit(entries[OLD]["retired"]))
    with pytest.raises(RegistryError, match="fails schema validation") as err:
        load_registry()
    problem = str(err.value).splitlines()[1]  # one line per problem, after the file's
    assert problem.startswith(f"  checkpoints.{OLD}.retired") and what in problem


def test_the_schema_refuses_a_retirement_that_is_not_a_mapping(retired):
    edit_registry(retired.path, lambda entries: entries[OLD].update(retired="yes"))
    with pytest.raises(RegistryError, match=f"checkpoints.{OLD}.retired: 'yes' is not of type"):
        load_registry()


def test_an_unquoted_yaml_date_is_refused(retired):
    text = retired.path.read_text().replace("date: '2026-11-28'", "date: 2026-11-28")
    retired.path.write_text(text)
    with pytest.raises(RegistryError, match=f"checkpoints.{OLD}.retired.date: datetime.date"):
        load_registry()


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda e: e[OLD]["retired"].update(use_instead="transformer_lm_tiny.pg19minj"),
         "'transformer_lm_tiny.pg19minj' is not in this registry. Did you mean "
         "'transformer_lm_tiny.pg19mini'"),
        (lambda e: e[NAME].update(retired=dict(RETIRED, use_instead=OLD)),
         f"{NAME} is retired itself"),  # each names the other: neither is active
        (lambda e: e[OLD]["retired"].update(use_instead=OLD), f"{OLD} is retired itself"),
        (lambda e: e[OLD]["retired"].update(date="2026-02-30"), "'2026-02-30' is not a date"),
    ],
)  # fmt: skip
def test_use_instead_must_name_an_active_checkpoint(retired, edit, what):
    edit_registry(retired.path, edit)
    with pytest.raises(RegistryError, match="fails validation") as err:
        load_registry()
    assert f"checkpoints.{OLD}.retired." in str(err.value) and what in str(err.value)


def zoo_list(capsys, monkeypatch, columns: int, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    capsys.readouterr()
    main(["list", *args])
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 250])  # the narrow view and every column
def test_zoo_list_hides_retired_checkpoints_and_all_shows_them_marked(retired, capsys, monkeypatch,
                                                                     columns):  # fmt: skip
    out = zoo_list(capsys, monkeypatch, columns)
    assert NAME in out and OLD not in out and "‡" not in out
    assert out.splitlines()[-1] == "1 retired checkpoint hidden; zoo list --all shows them"
    out = zoo_list(capsys, monkeypatch, columns, "--all")
    rows = {line.strip("│ ").split()[0]: line for line in out.splitlines() if "tiny" in line}
    assert "‡" in rows[OLD] and "‡" not in rows[NAME] and "hidden" not in out
    assert "‡ retired" in out  # the caption says what the mark means


def test_zoo_list_says_when_only_retired_checkpoints_match(retired, capsys, monkeypatch):
    out = zoo_list(capsys, monkeypatch, 80, "*_v0")
    assert out.splitlines() == [
        "no active published checkpoint matches these filters",
        "1 retired checkpoint hidden; zoo list --all shows them",
    ]


def test_json_lists_every_checkpoint_with_its_retired_field(retired, capsys, monkeypatch):
    records = {r["name"]: r for r in json.loads(zoo_list(capsys, monkeypatch, 80, "--json"))}
    assert set(records) == {NAME, OLD}
    assert records[NAME]["retired"] is None and records[OLD]["retired"] == RETIRED
    assert json.loads(zoo_list(capsys, monkeypatch, 80, "--json", "--all")) == list(
        records.values()
    )


def test_the_readme_table_names_retired_checkpoints_in_one_line(retired):
    entries = list(retired.entries.values())
    table = markdown_table(entries)
    assert f"| `{NAME}` |" in table and f"| `{OLD}` |" not in table
    (line,) = [line for line in table.splitlines() if OLD in line]
    assert line.startswith("Retired, still loadable with a warning")
    assert "(docs/checkpoints.md#retired-checkpoints)" in line
    with_all = markdown_table(entries, show_retired=True)
    (row,) = [line for line in with_all.splitlines() if f"| `{OLD}` |" in line]
    assert "‡" in row and "‡ retired" in with_all


def test_from_pretrained_of_a_retired_name_warns_once_and_loads_the_same_weights(retired):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a second warning from anywhere would show
        old = zoo.from_pretrained(OLD)
        new = zoo.from_pretrained(NAME)
    assert [(w.category, str(w.message)) for w in caught] == [(RetiredCheckpointWarning, WARNING)]
    assert caught[0].filename == __file__  # points at the caller's line
    assert old.published_name == OLD
    new_weights = new.state_dict()
    assert all((v == new_weights[k]).all() for k, v in old.state_dict().items())


def test_the_cli_shows_the_warning_in_one_line_once_per_command(retired, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        capsys.readouterr()
        main(["generate", "--checkpoint", OLD, "--prompt", "It", "--max-new-tokens", "2"])
        assert capsys.readouterr().err.splitlines() == [f"zoo: warning: {WARNING}"]
        main(["verify", OLD])  # loads the model, then resolves the name again for golden.json
        assert capsys.readouterr().err.splitlines() == [f"zoo: warning: {WARNING}"]
        main(["generate", "--checkpoint", NAME, "--prompt", "It", "--max-new-tokens", "2"])
        assert capsys.readouterr().err == ""


def test_pull_of_a_retired_name_warns(retired, monkeypatch, tmp_path):
    import zoo.hub.download as download

    monkeypatch.setattr(download, "fetch", lambda entry, *a, **k: tmp_path)  # no Hub here
    with pytest.warns(RetiredCheckpointWarning, match="retired") as caught:
        assert download.pull(OLD) == tmp_path
    assert [str(w.message) for w in caught] == [WARNING]
