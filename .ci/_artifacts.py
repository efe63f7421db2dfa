"""A distribution's sdist and wheel: built, validated, and checked file by file."""

from __future__ import annotations

import email.parser
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from _report import Report
from _repository import Distribution, git
from packaging.utils import canonicalize_name
from packaging.version import Version

REQUIRED_URLS = ("Documentation", "Source", "Changelog")


def build(distribution: Distribution, scratch: Path, report: Report) -> tuple[Path, Path] | None:
    """Build the sdist and the wheel into ``scratch``; ``None`` if the build failed."""
    # hatchling in the distribution's folder sees that distribution alone,
    # exactly as an isolated build from its sdist would.
    result = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(scratch)],
        cwd=distribution.folder,
        capture_output=True,
        text=True,
        check=False,
    )
    sdists = sorted(scratch.glob("*.tar.gz"))
    wheels = sorted(scratch.glob("*.whl"))
    if result.returncode != 0 or len(sdists) != 1 or len(wheels) != 1:
        report.fail(f"build: failed\n{result.stdout}{result.stderr}")
        return None
    report.note(f"built: {sdists[0].name}, {wheels[0].name}")
    return sdists[0], wheels[0]


def twine_check(sdist: Path, wheel: Path, report: Report) -> None:
    """Validate both files' metadata as the package index will, README included."""
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        check=False,
        env={"NO_COLOR": "1", "PATH": ""},
    )
    if result.returncode != 0:
        report.fail(f"twine check --strict: failed\n{result.stdout}{result.stderr}")
    else:
        report.note("metadata: twine check --strict passed (the README renders)")


def tracked_files(root: Path, distribution: Distribution) -> set[str]:
    """Return the tracked files of the leaf packages, as paths inside a wheel."""
    source = distribution.folder / "src"
    listed = git(root, "ls-files", "-z", "--", str(source)).split("\0")
    return {
        (root / path).relative_to(source).as_posix()
        for path in listed
        if path and (root / path).is_file()
    }


def check_wheel(
    distribution: Distribution, version: Version, wheel: Path, tracked: set[str], report: Report
) -> None:
    """Check the wheel's name, version, URLs and licence, and that it ships exactly its leaves."""
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if not name.endswith("/")]
        (metadata_path,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_path).decode("utf-8"))
    if canonicalize_name(metadata.get("Name", "")) != distribution.name:
        report.fail(f"wheel: Name is {metadata.get('Name')!r}, not {distribution.name!r}")
    if Version(metadata.get("Version", "0")) != version:
        report.fail(f"wheel: Version is {metadata.get('Version')!r}, not {version}")
    urls = metadata.get_all("Project-URL") or []
    labels = {str(url).split(",", 1)[0].strip().lower() for url in urls}
    missing = [label for label in REQUIRED_URLS if label.lower() not in labels]
    if missing:
        report.fail(f"wheel: Project-URL lacks {', '.join(missing)}")
    if not any(".dist-info/licenses/LICENSE" in name for name in names):
        report.fail("wheel: no LICENSE under .dist-info/licenses/")
    shipped = {name for name in names if ".dist-info/" not in name}
    for name in sorted(shipped):
        folder = name.rpartition("/")[0]
        if folder == "" or folder in distribution.namespace_levels:
            report.fail(f"wheel: {name} sits at a namespace level")
        elif not any(name.startswith(f"{leaf}/") for leaf in distribution.leaves):
            report.fail(f"wheel: {name} is outside the leaf packages")
        elif name not in tracked:
            report.fail(f"wheel: ships {name}, which git does not track")
    for name in sorted(tracked - shipped):
        report.fail(f"wheel: misses {name}, tracked in the source")
    for leaf in distribution.leaves:
        for marker in ("__init__.py", "py.typed"):
            if f"{leaf}/{marker}" not in shipped:
                report.fail(f"wheel: {leaf} has no {marker}")
    report.note(f"contents: {len(shipped)} files in the wheel, in {', '.join(distribution.leaves)}")


def check_sdist(distribution: Distribution, sdist: Path, report: Report) -> None:
    """Check that the sdist holds its metadata and licence, and no file above a leaf."""
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = [member.name for member in archive.getmembers() if member.isfile()]
    inside = {name.removeprefix(f"{top}/") for name in names}
    for required in ("PKG-INFO", "pyproject.toml", "README.md", "LICENSE"):
        if required not in inside:
            report.fail(f"sdist: no {required}")
    for name in sorted(inside):
        if not name.startswith("src/"):
            continue
        path = name.removeprefix("src/")
        folder = path.rpartition("/")[0]
        if folder == "" or folder in distribution.namespace_levels:
            report.fail(f"sdist: {name} sits at a namespace level")
        elif not any(path.startswith(f"{leaf}/") for leaf in distribution.leaves):
            report.fail(f"sdist: {name} is outside the leaf packages")
