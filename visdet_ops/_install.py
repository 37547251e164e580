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
# The source a build from source takes where no wheel serves the environment (pyproject.toml's Source URL).
SOURCE_URL = "https://github.com/visdet/visdet-ops"


def index_url() -> str:
    return os.environ.get("VISDET_OPS_INDEX_URL", DEFAULT_INDEX_URL).rstrip("/")


def install_command(variant: str) -> str:
    # --no-deps: torch is already the one we match; letting pip re-resolve it
    # under --force-reinstall could swap a +cpu torch for PyPI's CUDA build.
    return f"pip install --force-reinstall --no-deps visdet-ops -f {index_url()}/{variant}/"


def upgrade_torch_command() -> str:
    """What a torch older than every visdet-ops build needs first (then the install line of its variant)."""
    return f"pip install 'torch>={min_torch()}'"


def build_from_source_command(arch: str | None = None) -> str:
    """The build from source where no wheel fits (a JetPack torch, a machine we publish nothing for): against the
    torch already installed (no build isolation), for this GPU's arch when one is given."""
    archs = f"TORCH_CUDA_ARCH_LIST={arch} " if arch else ""
    return f"{archs}pip install --no-build-isolation --no-deps 'visdet-ops @ git+{SOURCE_URL}'"
