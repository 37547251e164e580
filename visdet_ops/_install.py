"""Where visdet-ops wheels live and the pip line that installs the right one.

Torch-free and import-light: the loader and `visdet-ops doctor` use it even
when torch or the compiled ops cannot be imported.
"""

from __future__ import annotations

import os
import re

# The wheel index: one find-links page per variant, <index>/<variant>/.
# The single place this URL is written; VISDET_OPS_INDEX_URL overrides it.
DEFAULT_INDEX_URL = "https://visdet.github.io/visdet-ops/whl"


def index_url() -> str:
    return os.environ.get("VISDET_OPS_INDEX_URL", DEFAULT_INDEX_URL).rstrip("/")


def variant_for(torch_version: str, torch_cuda: str | None) -> str:
    """The variant matching a torch install: pt<major><minor><cpu|cuXY>."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    if not match:
        raise ValueError(f"cannot read a torch version from {torch_version!r}")
    flavour = "cpu"
    if torch_cuda:
        cuda = re.match(r"(\d+)\.(\d+)", torch_cuda)
        if not cuda:
            raise ValueError(f"cannot read a CUDA version from {torch_cuda!r}")
        flavour = f"cu{cuda.group(1)}{cuda.group(2)}"
    return f"pt{match.group(1)}{match.group(2)}{flavour}"


def install_command(variant: str) -> str:
    # --no-deps: torch is already the one we match; letting pip re-resolve it
    # under --force-reinstall could swap a +cpu torch for PyPI's CUDA build.
    return f"pip install --force-reinstall --no-deps visdet-ops -f {index_url()}/{variant}/"
