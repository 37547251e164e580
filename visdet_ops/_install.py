"""Where visdet-ops wheels live and the pip line that installs the right one.

Torch-free and import-light: the loader and `visdet-ops doctor` use it even
when torch or the compiled ops cannot be imported.
"""

from __future__ import annotations

import os

from ._build_rules import min_torch

# The wheel index: one find-links page per variant, <index>/<variant>/.
# The single place this URL is written; VISDET_OPS_INDEX_URL overrides it.
DEFAULT_INDEX_URL = "https://visdet.github.io/visdet-ops/whl"


def index_url() -> str:
    return os.environ.get("VISDET_OPS_INDEX_URL", DEFAULT_INDEX_URL).rstrip("/")


def install_command(variant: str) -> str:
    # --no-deps: torch is already the one we match; letting pip re-resolve it
    # under --force-reinstall could swap a +cpu torch for PyPI's CUDA build.
    return f"pip install --force-reinstall --no-deps visdet-ops -f {index_url()}/{variant}/"


def upgrade_torch_command() -> str:
    """What a torch older than every visdet-ops build needs first (then the install line of its variant)."""
    return f"pip install 'torch>={min_torch()}'"
