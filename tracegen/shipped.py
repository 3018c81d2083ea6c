"""Files tracegen reads at run time that live outside the Python package in a checkout.

The design card keeps text templates in the checkout's top-level `templates/`; the wheel maps that
folder to `tracegen/templates/` (pyproject: package-dir), so an installed tracegen finds them
inside the package and a source checkout finds them beside it.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent


def template_text(name: str) -> str:
    """The text of templates/<name>, from the installed package or the checkout."""
    installed = resources.files("tracegen").joinpath("templates", name)
    if installed.is_file():
        return installed.read_text(encoding="utf-8")
    return (_CHECKOUT / "templates" / name).read_text(encoding="utf-8")
