"""The optional dependencies, each installed by a pip extra of pyproject.toml (plot, tensorboard, ct2,
tokenized, notebook, serve) and imported only where it is used: where one is missing, `require` says which
extra installs it in one line, and scripts print that line (`cli.exits_on_missing_extra`), not a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip extra that installs it."""


def require(module: str, extra: str) -> ModuleType:
    """`module` imported, or MissingExtra: "matplotlib is not installed: pip install 'hf_vanilla[plot]'"."""
    package = module.partition(".")[0]
    try:
        # The package first: a submodule imported earlier is found in sys.modules even
        # where the package is gone.
        importlib.import_module(package)
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{package} is not installed: pip install 'hf_vanilla[{extra}]'") from err
