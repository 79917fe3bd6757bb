"""requirements.lock is what everything installs (./dev, CI, the image): every dependency
of pyproject.toml pinned exactly, each pin allowed by pyproject's own range, and the
environment these tests run in built from it."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testkit.services import ROOT


def locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = [*project["dependencies"], *extras["test"], *extras["bench"]]
    return [Requirement(name) for name in names]


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pins = locked()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        if name == "setuptools":  # pip leaves it out of a freeze; the build brings its own
            continue
        assert name in pins, f"{requirement} is not in requirements.lock (run ./dev lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {requirement}"
        )


def test_this_environment_was_installed_from_the_lock() -> None:
    pins = locked()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        if name not in pins:
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # an extra not installed here (the bench's)
        assert installed == pins[name], f"{name} {installed} installed, {pins[name]} locked"
