"""The API-break gate: a breaking change needs the version bump semver asks for.

Each distribution's public API (its leaf packages, as Griffe reads them from
source, ``__all__`` deciding what is public) is compared with the one at its
last release, the highest tag ``<distribution>-v<version>`` in the history of
HEAD. With no such tag there is nothing to break: "no release yet".

The bump a breaking change needs: a new major version from 1.0 on; before
1.0, a new minor version (0.1.x to 0.2.0), so that code written against 0.1
keeps working on every 0.1.x.

    python .ci/api_gate.py [DISTRIBUTION ...] [--root PATH]

Exit status 1 when a distribution breaks its API without that bump.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import griffe
from _repository import ROOT, Distribution, discover, git, released_versions
from packaging.version import Version

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Verdict:
    """What the gate found for one distribution."""

    baseline: Version | None
    current: Version
    breakages: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        """Tell whether the version bump covers the breakages found."""
        if not self.breakages or self.baseline is None:
            return True
        return bump_allows_breaking(self.baseline, self.current)


def bump_allows_breaking(baseline: Version, current: Version) -> bool:
    """Tell whether going from ``baseline`` to ``current`` may break the API.

    From 1.0 on only a new major version may; before 1.0 a new minor one
    (or 1.0 itself) may, and a patch release never does.
    """
    if baseline.major >= 1:
        return current.major > baseline.major
    return (current.major, current.minor) > (baseline.major, baseline.minor)


def check(root: Path, distribution: Distribution) -> Verdict:
    """Compare a distribution's API with its last release.

    Raises:
        RuntimeError: if ``root`` is not a git work tree.
        LookupError: if the distribution declares no version.
        packaging.version.InvalidVersion: if that version is no version.
    """
    current = Version(distribution.version)
    versions = released_versions(root, distribution)
    if not versions:
        return Verdict(None, current)
    baseline = versions[-1]
    tag = distribution.tag(str(baseline))
    source = distribution.folder / "src"
    relative = source.relative_to(root)
    verdict = Verdict(baseline, current)
    for module in distribution.modules:
        try:
            old = griffe.load_git(
                module,
                ref=tag,
                repo=root,
                search_paths=[relative],
                allow_inspection=False,
                resolve_aliases=True,
            )
        except ImportError:
            continue  # new since the release: adding a package breaks nothing
        try:
            new = griffe.load(
                module, search_paths=[source], allow_inspection=False, resolve_aliases=True
            )
        except ImportError:
            verdict.breakages.append(f"{module}: the package was removed")
            continue
        verdict.breakages.extend(
            f"{module}.{name}: no longer in __all__"
            for name in sorted(_exports(old) - _exports(new))
        )
        verdict.breakages.extend(_new_abstract_methods(module, old, new))
        verdict.breakages.extend(
            _ANSI.sub("", breakage.explain(style=griffe.ExplanationStyle.ONE_LINE)).replace(
                f"{root}/", ""
            )
            for breakage in griffe.find_breaking_changes(old, new)
        )
    return verdict


def _new_abstract_methods(
    module: str, old: griffe.Object | griffe.Alias, new: griffe.Object | griffe.Alias
) -> list[str]:
    """List abstract methods a public class gained: every subclass written before breaks.

    Griffe judges an API by its callers; for a port, the implementers count
    as much, and a new abstract method is what breaks them.
    """
    found: list[str] = []
    for name in sorted(_exports(old) & _exports(new)):
        try:
            before, after = old[name], new[name]
            if not (before.is_class and after.is_class):
                continue
            added = _abstract(after) - _abstract(before)
        except (griffe.AliasResolutionError, griffe.CyclicAliasError, KeyError):
            continue
        found.extend(f"{module}.{name}.{method}: new abstract method" for method in sorted(added))
    return found


def _abstract(cls: griffe.Object | griffe.Alias) -> set[str]:
    return {name for name, member in cls.all_members.items() if "abstractmethod" in member.labels}


def _exports(module: griffe.Object | griffe.Alias) -> set[str]:
    # Griffe sees a name dropped from __all__ but still imported as a member
    # that is still there; for the package's users it is gone all the same.
    return {str(name) for name in module.exports or ()}


def describe(distribution: Distribution, verdict: Verdict) -> list[str]:
    """Return the lines that report a verdict; the first one sums it up."""
    name = distribution.name
    if verdict.baseline is None:
        return [f"{name}: no release yet, nothing to compare"]
    against = f"{verdict.current} against {distribution.tag(str(verdict.baseline))}"
    if not verdict.breakages:
        return [f"{name}: {against}: no breaking change"]
    if verdict.allowed:
        return [f"{name}: {against}: breaking changes, allowed by the version bump"] + [
            f"  {line}" for line in verdict.breakages
        ]
    rule = "a new major version" if verdict.baseline.major >= 1 else "a new minor version"
    return [
        f"{name}: {against}: breaking changes need {rule} (semver), the version says otherwise"
    ] + [f"  {line}" for line in verdict.breakages]


def main(argv: list[str] | None = None) -> int:
    """Run the gate on the named distributions, or on all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distributions", nargs="*", help="names; all under packages/ when none")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    arguments = parser.parse_args(argv)
    root = arguments.root.resolve()
    try:
        git(root, "rev-parse", "--is-inside-work-tree")
    except RuntimeError:
        parser.error(f"{root} is not a git work tree: the gate reads its history and tags")
    found = discover(root)
    unknown = sorted(set(arguments.distributions) - set(found))
    if unknown:
        parser.error(f"not a distribution under packages/: {', '.join(unknown)}")
    failed = False
    for name in arguments.distributions or sorted(found):
        verdict = check(root, found[name])
        print("\n".join(describe(found[name], verdict)))
        failed = failed or not verdict.allowed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
