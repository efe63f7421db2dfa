"""The registration check: every distribution is listed wherever a list is kept by hand.

A distribution under ``packages/`` must appear in

- pyproject.toml: ``[tool.mypy]`` ``mypy_path`` (its ``src``) and ``files``
  (its ``src``, and its ``benchmarks`` when it has some);
- hatch.toml: the ``lint`` environment's ``types`` script, one
  ``mypy packages/<name>/tests`` per test folder;
- mkdocs.yml: the mkdocstrings handler's ``paths`` (its ``src``);
- pyproject.toml: an import-linter contract naming each of its packages;
- README.md and docs/index.md: a row of the distributions table;
- docs/concepts.md: the section "How the code is split";
- CHANGELOG.md: a section ``## <name>``.

    python .ci/registration.py [--root PATH]      (hatch run release:registration)

Exit status 1, with the list of what is missing, when anything is.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import _changelog
import yaml
from _repository import ROOT, Distribution, discover


def missing(root: Path, distribution: Distribution) -> list[str]:
    """Return every hand-kept list that does not register the distribution yet."""
    folder = distribution.folder.relative_to(root).as_posix()
    pyproject = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    hatch = tomllib.loads((root / "hatch.toml").read_text("utf-8"))
    mkdocs = yaml.safe_load((root / "mkdocs.yml").read_text("utf-8"))
    found: list[str] = []
    mypy = pyproject.get("tool", {}).get("mypy", {})
    if f"{folder}/src" not in mypy.get("mypy_path", []):
        found.append(f"pyproject.toml [tool.mypy] mypy_path: {folder}/src")
    wanted = [f"{folder}/src"]
    if (distribution.folder / "benchmarks").is_dir():
        wanted.append(f"{folder}/benchmarks")
    found.extend(
        f"pyproject.toml [tool.mypy] files: {path}"
        for path in wanted
        if path not in mypy.get("files", [])
    )
    if (distribution.folder / "tests").is_dir():
        types = hatch.get("envs", {}).get("lint", {}).get("scripts", {}).get("types", [])
        command = f"mypy {folder}/tests"
        if command not in types:
            found.append(f"hatch.toml [envs.lint.scripts] types: {command}")
    if f"{folder}/src" not in _mkdocstrings_paths(mkdocs):
        found.append(f"mkdocs.yml mkdocstrings python paths: {folder}/src")
    named = _contract_modules(pyproject)
    found.extend(
        f"pyproject.toml [[tool.importlinter.contracts]]: a contract naming {module}"
        for module in distribution.modules
        if module not in named
    )
    table_row = re.compile(rf"^\|\s*`{re.escape(distribution.name)}`\s*\|", re.MULTILINE)
    found.extend(
        f"{page}: a row of the distributions table for `{distribution.name}`"
        for page in ("README.md", "docs/index.md")
        if not table_row.search((root / page).read_text("utf-8"))
    )
    if f"`{distribution.name}`" not in _section(root / "docs/concepts.md", "How the code is split"):
        found.append(f"docs/concepts.md 'How the code is split': `{distribution.name}`")
    changelog = _changelog.parse((root / "CHANGELOG.md").read_text("utf-8"))
    if distribution.name not in changelog.sections:
        found.append(f"CHANGELOG.md: a section '## {distribution.name}'")
    return found


def _mkdocstrings_paths(mkdocs: dict[str, Any]) -> list[str]:
    for plugin in mkdocs.get("plugins", []):
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"].get("handlers", {}).get("python", {})
            return [str(path) for path in python.get("paths", [])]
    return []


def _contract_modules(pyproject: dict[str, Any]) -> set[str]:
    contracts = pyproject.get("tool", {}).get("importlinter", {}).get("contracts", [])
    named: set[str] = set()
    for contract in contracts:
        for key in ("modules", "source_modules", "forbidden_modules", "layers", "containers"):
            named.update(str(module) for module in contract.get(key, []))
    return named


def _section(page: Path, title: str) -> str:
    """Return the text of a page's section, up to the next heading of its level or above."""
    text = page.read_text("utf-8")
    found = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.MULTILINE)
    if found is None:
        return ""
    level = len(found.group(1))
    rest = text[found.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest if end is None else rest[: end.start()]


def main(argv: list[str] | None = None) -> int:
    """Check every distribution; exit 1 and list the gaps if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    root = parser.parse_args(argv).root.resolve()
    found = discover(root)
    gaps = {name: missing(root, distribution) for name, distribution in found.items()}
    for name, lines in gaps.items():
        print(f"{name}: {'registered everywhere' if not lines else 'NOT registered in'}")
        for line in lines:
            print(f"  - {line}")
    layout = _changelog.parse((root / "CHANGELOG.md").read_text("utf-8")).report()
    verdict = "departs from its layout" if layout else "laid out as Keep a Changelog"
    print(f"CHANGELOG.md: {verdict}")
    for line in layout:
        print(f"  - {line}")
    if any(gaps.values()):
        print("Register each one in the lists above (CONTRIBUTING.md, 'Add a distribution').")
    if any(gaps.values()) or layout:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
