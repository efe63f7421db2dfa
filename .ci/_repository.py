"""What the repository's checks share: its distributions, versions and tags.

Distributions are found from ``packages/*/pyproject.toml``, so a new one is
covered by every check without editing any list.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
TAG_SEPARATOR = "-v"
_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class Distribution:
    """One distribution under ``packages/``, as its ``pyproject.toml`` declares it."""

    name: str
    folder: Path
    pyproject: dict[str, Any]

    @property
    def project(self) -> dict[str, Any]:
        table: dict[str, Any] = self.pyproject.get("project", {})
        return table

    @property
    def leaves(self) -> tuple[str, ...]:
        """Return the leaf packages the wheel ships, as paths below ``src/``.

        They are the ``only-include`` entries of the wheel target, the one
        place the layout names them.
        """
        wheel = self.pyproject.get("tool", {}).get("hatch", {}).get("build", {})
        included = wheel.get("targets", {}).get("wheel", {}).get("only-include", [])
        return tuple(
            str(entry).removeprefix("src/") for entry in included if str(entry).startswith("src/")
        )

    @property
    def modules(self) -> tuple[str, ...]:
        """Return the importable names of the leaf packages."""
        return tuple(leaf.replace("/", ".") for leaf in self.leaves)

    @property
    def namespace_levels(self) -> frozenset[str]:
        """Return every path above a leaf: levels where no file may be shipped."""
        levels: set[str] = set()
        for leaf in self.leaves:
            parts = leaf.split("/")
            levels.update("/".join(parts[:end]) for end in range(1, len(parts)))
        return frozenset(levels)

    @property
    def version(self) -> str:
        """Return the version the source declares (static, or Hatch's version file).

        Raises:
            LookupError: if the pyproject declares neither, or the file holds no
                ``__version__``.
        """
        static = self.project.get("version")
        if isinstance(static, str):
            return static
        source = self.pyproject.get("tool", {}).get("hatch", {}).get("version", {}).get("path")
        if not source:
            raise LookupError(f"{self.name}: no [project] version and no [tool.hatch.version] path")
        found = _VERSION_ASSIGNMENT.search((self.folder / str(source)).read_text("utf-8"))
        if found is None:
            raise LookupError(f"{self.name}: {source} assigns no __version__")
        return found.group(1)

    def tag(self, version: str) -> str:
        """Return the git tag of one release: ``<distribution>-v<version>``."""
        return f"{self.name}{TAG_SEPARATOR}{version}"


def discover(root: Path = ROOT) -> dict[str, Distribution]:
    """Map every distribution's normalised name to its description.

    Raises:
        LookupError: if a ``pyproject.toml`` under ``packages/`` has no name.
    """
    found: dict[str, Distribution] = {}
    for path in sorted(root.glob("packages/*/pyproject.toml")):
        pyproject = tomllib.loads(path.read_text("utf-8"))
        declared = pyproject.get("project", {}).get("name")
        if not declared:
            raise LookupError(f"{path.parent.name}: pyproject.toml has no [project] name")
        name = str(declared)
        found[canonicalize_name(name)] = Distribution(
            canonicalize_name(name), path.parent, pyproject
        )
    return found


def git(root: Path, *arguments: str) -> str:
    """Run git in ``root`` and return what it printed.

    Raises:
        RuntimeError: if git fails, with its own message.
    """
    result = subprocess.run(
        ["git", *arguments], cwd=root, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {arguments[0]} failed: {result.stderr.strip()}")
    return result.stdout


def released_versions(root: Path, distribution: Distribution) -> list[Version]:
    """Return the versions tagged for a distribution in the history of HEAD, oldest first.

    A tag on another branch's history (a maintenance line, say) is not a
    baseline for this one. Tags whose suffix is no version are ignored.

    Raises:
        RuntimeError: if ``root`` is not a git work tree.
    """
    prefix = distribution.tag("")
    listed = git(root, "tag", "--list", "--merged", "HEAD", f"{prefix}*").split()
    versions = []
    for tag in listed:
        try:
            versions.append(Version(tag.removeprefix(prefix)))
        except InvalidVersion:
            continue
    return sorted(versions)
