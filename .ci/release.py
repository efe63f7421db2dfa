"""The release check of one distribution: everything before publishing, in one command.

    python .ci/release.py DISTRIBUTION         before a release (hatch run release:check NAME)
    python .ci/release.py --ci --all           what CI runs on every distribution

Both modes check that the version is not older than the last release (the
highest tag ``<distribution>-v<version>`` in the history of HEAD) and that
CHANGELOG.md has a section for it with at least one entry; build the sdist
and the wheel in the distribution's folder; validate their metadata with
``twine check --strict`` (which also renders the README as the package
index will) and require the Documentation, Source and Changelog URLs;
check that the README describes its own distribution alone (_readme.py);
check their contents (every file of the wheel in a leaf package and tracked
by git, nothing at a namespace level, the licence in both); run the
API-break gate; and print the tag name.

Before a release the check also demands what only a release has: a version
above the last release and not tagged yet, a dated CHANGELOG section (not
"Unreleased"), and no uncommitted change in the distribution or the
changelog. The files built are then left in ``dist/<tag>/`` for publishing,
which stays a manual step (docs/releasing.md). In CI the version may still
equal the last release (nothing to release yet) and the section may still
say "Unreleased"; a released version must still be dated.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import _artifacts
import _changelog
import _readme
import api_gate
from _report import Report
from _repository import ROOT, Distribution, discover, git, released_versions
from packaging.version import InvalidVersion, Version


def check(root: Path, distribution: Distribution, *, ci: bool) -> Report:
    """Run every check on one distribution.

    Before a release (``ci`` false) the files built are left in
    ``dist/<tag>/`` when every check passed.

    Returns:
        The report; the distribution is ready when it holds no problem.
    """
    report = Report(distribution)
    try:
        version = Version(distribution.version)
    except (LookupError, InvalidVersion) as error:
        report.fail(f"version: {error}")
        return report
    _check_version(root, distribution, version, report, ci=ci)
    _check_changelog(root, distribution, version, report, ci=ci)
    _check_urls(distribution, report)
    _readme.check(root, distribution, discover(root), report)
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        built = _artifacts.build(distribution, Path(scratch), report)
        if built is not None:
            sdist, wheel = built
            _artifacts.twine_check(sdist, wheel, report)
            tracked = _artifacts.tracked_files(root, distribution)
            _artifacts.check_wheel(distribution, version, wheel, tracked, report)
            _artifacts.check_sdist(distribution, sdist, report)
        verdict = api_gate.check(root, distribution)
        (summary, *details) = api_gate.describe(distribution, verdict)
        (report.note if verdict.allowed else report.fail)(f"api: {summary}")
        report.notes.extend(f"api: {line.strip()}" for line in details)
        tag = distribution.tag(str(version))
        report.note(f"tag: {tag}")
        if ci:
            return report
        changed = git(root, "status", "--porcelain", "--", str(distribution.folder), "CHANGELOG.md")
        if changed.strip():
            report.fail("uncommitted changes in the distribution or CHANGELOG.md: commit first")
        if built is not None and not report.problems:
            report.out = root / "dist" / tag
            shutil.rmtree(report.out, ignore_errors=True)
            report.out.mkdir(parents=True)
            for path in built:
                shutil.copy2(path, report.out / path.name)
    return report


def _check_version(
    root: Path, distribution: Distribution, version: Version, report: Report, *, ci: bool
) -> None:
    released = released_versions(root, distribution)
    last = released[-1] if released else None
    report.note(f"version: {version}, last release: {last or 'none'}")
    if last is not None and version < last:
        report.fail(f"version: {version} is older than the last release {last}")
    if not ci and last is not None and version == last:
        report.fail(f"version: {version} is released already; bump it first")
    tag = distribution.tag(str(version))
    if not ci and git(root, "tag", "--list", tag).strip():
        report.fail(f"version: the tag {tag} exists already")


def _check_changelog(
    root: Path, distribution: Distribution, version: Version, report: Report, *, ci: bool
) -> None:
    changelog = _changelog.parse((root / "CHANGELOG.md").read_text("utf-8"))
    for problem in changelog.report(distribution.name):
        report.fail(f"CHANGELOG.md: {problem}")
    name = distribution.name
    if name not in changelog.sections:
        report.fail(f"CHANGELOG.md: no section '## {name}'")
        return
    newer = [
        r.title for r in changelog.sections[name] if r.version is not None and r.version > version
    ]
    if newer:
        report.fail(f"CHANGELOG.md: {name} has {newer[0]}, newer than the version {version}")
    release = changelog.release(name, version)
    if release is None:
        report.fail(f"CHANGELOG.md: no '### [{version}] - ...' under '## {name}'")
        return
    report.note(f"changelog: line {release.line}, {release.title}, {release.entries} entries")
    if release.entries == 0:
        report.fail(f"CHANGELOG.md: the section of {version} has no entry")
    if not release.released:
        released = released_versions(root, distribution)
        if not ci:
            report.fail(f"CHANGELOG.md: {version} still says Unreleased; put the release date")
        elif version in released:
            report.fail(f"CHANGELOG.md: {version} is tagged but its section says Unreleased")


def _check_urls(distribution: Distribution, report: Report) -> None:
    urls = {str(k).lower(): str(v) for k, v in distribution.project.get("urls", {}).items()}
    for label in _artifacts.REQUIRED_URLS:
        url = urls.get(label.lower())
        if url is None:
            report.fail(f"pyproject.toml: [project.urls] has no {label}")
        elif not url.startswith("https://"):
            report.fail(f"pyproject.toml: the {label} URL is not https")


def main(argv: list[str] | None = None) -> int:
    """Check the named distributions; exit 1 if any is not ready."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distributions", nargs="*", help="names of distributions under packages/")
    parser.add_argument("--all", action="store_true", help="every distribution under packages/")
    parser.add_argument("--ci", action="store_true", help="all but what only a release demands")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    arguments = parser.parse_args(argv)
    root = arguments.root.resolve()
    try:
        git(root, "rev-parse", "--is-inside-work-tree")
    except RuntimeError:
        parser.error(f"{root} is not a git work tree: the checks read its history and tags")
    found = discover(root)
    if arguments.all == bool(arguments.distributions):
        parser.error("name one or more distributions, or pass --all")
    names = sorted(found) if arguments.all else arguments.distributions
    unknown = [name for name in names if name not in found]
    if unknown:
        parser.error(f"not a distribution under packages/: {', '.join(unknown)}")
    failed = []
    for name in names:
        report = check(root, found[name], ci=arguments.ci)
        print(f"== {name} ({'CI' if arguments.ci else 'release'} check)")
        for line in report.notes:
            print(f"   {line}")
        for line in report.problems:
            print(f"   FAIL {line}")
        if report.problems:
            failed.append(name)
        elif report.out is not None:
            version = found[name].version
            tag = found[name].tag(version)
            out = report.out.relative_to(root)
            print(f"   ready: the files are in {out}/; to publish:")
            print(f"     git tag -a {tag} -m '{name} {version}'")
            print(f"     git push origin {tag}")
            print(f"     twine upload {out}/*")
    if failed:
        print(f"not ready: {', '.join(failed)}")
        return 1
    print(f"ready: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
