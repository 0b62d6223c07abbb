"""MkDocs hooks of the documentation site (mkdocs.yml names this file; it is not a page).

- **Repository files.** A page links to any file of the repository with the relative link that
  works on GitHub (``../recipes/transformer_lm/pg19mini.yaml``). Each linked file joins the site
  under ``repo/`` (Markdown rendered as a page, other files copied as they are; never weights nor a
  file over :data:`MAX_BYTES`), the Markdown files it links to in turn, and every link is rewritten
  to the site's copy. A link to a missing or excluded file is left alone: ``--strict`` fails on it.
- **Model cards.** The card of each checkpoint of ``checkpoints.yaml`` (``checkpoints/NAME/
  README.md``, its pictures with it) is a page, listed in the nav under Checkpoints.
- **The command line.** docs/cli.md's :data:`CLI_MARKER` becomes the ``--help`` of every ``zoo``
  command, printed by its parser at build time.
- **Docstrings** (:class:`ZooDocstrings`, a Griffe extension that mkdocstrings loads): zoo.kernels'
  modules are read from ``kernels/`` (its ``__path__``), and the docstrings' Sphinx roles
  (``:func:``, ``:class:``, ...) become links.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
from pathlib import Path
from textwrap import indent
from unittest.mock import patch

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE_PREFIX = "repo/"  # where repository files outside docs/ live in the site
MAX_BYTES = 2_000_000
NEVER = (".safetensors", ".ckpt", ".pt", ".bin")
CLI_MARKER = "<!-- zoo --help -->"
# the target of a Markdown link or image, or of a reference definition (raw HTML is left alone,
# as MkDocs leaves it)
LINK = re.compile(r"(\]\(<?|^ {0,3}\[[^\]]+\]:[ \t]*<?)([^\s)>]+)", re.M)
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.M | re.S)


def repo_path(src_uri: str) -> str:
    """The repository path of a site file (``img/a.png`` -> ``docs/img/a.png``)."""
    return src_uri[len(SITE_PREFIX) :] if src_uri.startswith(SITE_PREFIX) else f"docs/{src_uri}"


def site_path(path: str) -> str:
    """The site file of a repository path, the inverse of :func:`repo_path`."""
    return path[len("docs/") :] if path.startswith("docs/") else SITE_PREFIX + path


def linked(src_uri: str, target: str) -> str | None:
    """The repository path ``target`` names from the page ``src_uri``, if it is one."""
    if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target):  # a URL, an anchor, an absolute path
        return None
    path = target.split("#")[0].split("?")[0]
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path(src_uri)), path))
    if not path or resolved.startswith(".."):
        return None
    # a symlink may not lead out of the repository either: nothing outside it joins the site
    return resolved if (ROOT / resolved).resolve().is_relative_to(ROOT.resolve()) else None


def publishable(path: str) -> bool:
    """Whether a repository file may join the site."""
    file = ROOT / path
    return file.is_file() and not path.endswith(NEVER) and file.stat().st_size <= MAX_BYTES


def landing(path: str) -> str | None:
    """The repository file a link to ``path`` lands on: a folder's README.md or index.md, or the
    listing page :func:`on_files` writes for it; None for a file that stays out of the site."""
    if (ROOT / path).is_dir():
        pages = [f"{path}/{name}" for name in ("README.md", "index.md")]
        return next((page for page in pages if (ROOT / page).is_file()), pages[1])
    return path if path.startswith("docs/") or publishable(path) else None


def listing(folder: str) -> str:
    """The page of a linked folder that has no README.md: its files and folders, linked."""
    entries = [
        f"{p.name}/" if p.is_dir() else p.name
        for p in sorted((ROOT / folder).iterdir())
        if not p.name.startswith((".", "__")) and (p.is_dir() or publishable(f"{folder}/{p.name}"))
    ]
    links = "".join(f"- [`{entry}`]({entry})\n" for entry in entries)
    return f"# `{folder}/`\n\nThis folder of the repository holds:\n\n{links}"


def rewrite(markdown: str, src_uri: str) -> str:
    """``markdown`` with its links to repository files pointed at their site copies."""

    def fix(match: re.Match) -> str:
        path = linked(src_uri, match[2])
        target = path and landing(path)
        if target is None:
            return match[0]
        new = posixpath.relpath(site_path(target), posixpath.dirname(src_uri) or ".")
        return match[1] + new + match[2][len(match[2].split("#")[0]) :]

    pieces, start = [], 0
    for fence in FENCE.finditer(markdown):  # code blocks stay as they are
        pieces += [LINK.sub(fix, markdown[start : fence.start()]), fence[0]]
        start = fence.end()
    return "".join([*pieces, LINK.sub(fix, markdown[start:])])


def model_cards() -> list[str]:
    """The published model cards (repository paths), in checkpoints.yaml's order."""
    names = yaml.safe_load((ROOT / "checkpoints.yaml").read_text())["checkpoints"]
    cards = (f"checkpoints/{name}/README.md" for name in names)
    return [card for card in cards if (ROOT / card).is_file()]


def on_config(config):
    """Lists the model cards in the nav, under Checkpoints."""
    for section in config.nav or []:
        if isinstance(section, dict) and "Checkpoints" in section:
            section["Checkpoints"].append({"Model cards": [site_path(c) for c in model_cards()]})
            return config
    raise ValueError("mkdocs.yml: the nav has no Checkpoints section for the model cards")


def on_files(files, config):
    """Adds the model cards and every repository file a page links to, transitively."""
    from mkdocs.structure.files import File

    def add(path: str) -> None:
        if files.get_file_from_path(site_path(path)) is not None:
            return
        if (ROOT / path).is_file():
            file = File.generated(config, site_path(path), abs_src_path=str(ROOT / path))
        else:
            file = File.generated(config, site_path(path), content=listing(posixpath.dirname(path)))
        files.append(file)
        if path.endswith(".md"):
            queue.append(file)

    queue = [file for file in files if file.is_documentation_page()]
    for card in model_cards():
        add(card)
    while queue:
        page = queue.pop()
        for match in LINK.finditer(FENCE.sub("", page.content_string)):
            path = linked(page.src_uri, match[2])
            target = path and landing(path)
            if target is not None and ((ROOT / target).is_file() or (ROOT / path).is_dir()):
                add(target)
    return files


def on_page_markdown(markdown, page, config, files):
    """Points links at the site's copies; fills docs/cli.md with the commands' help."""
    if page.file.src_uri == "cli.md":
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return rewrite(markdown, page.file.src_uri)


# The command line ------------------------------------------------------------------------------


def zoo_commands() -> list[str]:
    """Every ``zoo`` command, the Lightning ones first, in zoo/cli.py's order."""
    from zoo.cli import COMMANDS, LIGHTNING_COMMANDS

    return [*LIGHTNING_COMMANDS, *COMMANDS]


def command_help(args: list[str]) -> str:
    """What ``zoo ARGS`` prints, run in this process at a fixed width of 100 columns."""
    from zoo.cli import main

    out = io.StringIO()
    try:
        with patch.dict(os.environ, COLUMNS="100"), contextlib.redirect_stdout(out):
            main(args)
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"zoo {' '.join(args)} exited {e.code}") from e
    return out.getvalue().rstrip()


def cli_reference() -> str:
    """A section per command: ``zoo --help``, then each command's ``--help`` (a long one, as the
    Lightning commands' with every Trainer flag, folded)."""
    sections = [f"## `zoo`\n\n```text\n{command_help([])}\n```"]
    for command in zoo_commands():
        text = command_help([command, "--help"])
        block, lines = f"```text\n{text}\n```", text.count("\n") + 1
        if lines > 80:
            title = f'??? example "`zoo {command} --help` ({lines} lines)"'
            block = f"{title}\n\n{indent(block, '    ')}"
        sections.append(f"## `zoo {command}`\n\n{block}")
    return "\n\n".join(sections)


# Docstrings (a Griffe extension: mkdocs.yml's mkdocstrings options name it) -------------------

ROLE = re.compile(r":(?:func|class|mod|data|meth|attr|exc|obj|const):`(~?)([\w.]+)`")

try:
    import griffe
except ImportError:  # the hooks alone, without mkdocstrings
    griffe = None
else:

    class ZooDocstrings(griffe.Extension):
        """Loads zoo.kernels' modules from ``kernels/`` and turns Sphinx roles into links."""

        def on_package(self, *, pkg, loader, **kwargs) -> None:
            if pkg.name != "zoo":
                return
            dispatch = pkg["kernels"]  # zoo/kernels.py: its __path__ is kernels/
            for path in sorted((ROOT / "kernels").glob("*.py")):
                code = path.read_text(encoding="utf-8")
                loader.lines_collection[path] = code.splitlines()
                module = griffe.visit(
                    path.stem, filepath=path, code=code, parent=dispatch,
                    extensions=loader.extensions, docstring_parser=loader.docstring_parser,
                    docstring_options=loader.docstring_options,
                    lines_collection=loader.lines_collection,
                    modules_collection=loader.modules_collection,
                )  # fmt: skip
                dispatch.set_member(path.stem, module)
            self._unshadow(pkg)
            self._link_roles(pkg)

        def _unshadow(self, module) -> None:
            """``from .push import push`` makes ``zoo.publishing.push`` the function at runtime,
            where Griffe keeps the submodule: give the name back to what the import names."""
            for name, member in list(module.members.items()):
                if member.is_alias or not member.is_module:
                    continue
                self._unshadow(member)
                if module.imports.get(name) == f"{member.path}.{name}":
                    for alias in module.members.values():  # the other names imported from it
                        if alias.is_alias and alias.target_path.startswith(f"{member.path}."):
                            alias.target = member[alias.target_path[len(member.path) + 1 :]]
                    module.set_member(name, griffe.Alias(name, member[name], parent=module))

        def _link_roles(self, obj) -> None:
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(lambda m: _autoref(obj, m), obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    self._link_roles(member)


def _autoref(obj, role: re.Match) -> str:
    """An optional link (no warning when unresolved) to the object a Sphinx role names."""
    short, target = role[1], role[2]
    head, _, rest = target.partition(".")
    try:
        identifier = obj.resolve(head) + (f".{rest}" if rest else "")
    except Exception:  # griffe's NameResolutionError, or an alias it cannot follow: as written
        identifier = target
    title = target.rsplit(".", 1)[-1] if short else target
    return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'
