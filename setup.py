"""Maps the repository's top-level folders into the single import package `widebeam`.

pyproject.toml holds the metadata; this file only computes the package list, which a
static table cannot express for folders that are renamed on import.
"""

from setuptools import find_packages, setup

PACKAGE_ROOTS = {
    "widebeam": "widebeam",
    "widebeam.services": "services",
}


def _packages() -> list[str]:
    found = ["widebeam", "widebeam.services"]
    for name, folder in PACKAGE_ROOTS.items():
        found += [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return sorted(set(found))


setup(packages=_packages(), package_dir=PACKAGE_ROOTS)
