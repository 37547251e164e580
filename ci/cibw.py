"""cibuildwheel hooks (inside the manylinux container): install the torch of
the variant being built (VISDET_OPS_FLAVOUR, VISDET_OPS_TORCH from the
workflow's matrix row) before the build and before the tests.

  python ci/cibw.py install-torch
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci import matrix as variants  # noqa: E402


def install_torch() -> int:
    flavour = variants.load().flavour(os.environ["VISDET_OPS_FLAVOUR"])
    version = flavour.torch_for(os.environ["VISDET_OPS_TORCH"])
    cmd = [sys.executable, "-m", "pip", "install", f"torch=={version}"]
    if not flavour.torch_from_pypi(version):
        cmd += ["--index-url", flavour.torch_index, "--extra-index-url", "https://pypi.org/simple"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    if sys.argv[1:] != ["install-torch"]:
        sys.exit(__doc__)
    sys.exit(install_torch())
