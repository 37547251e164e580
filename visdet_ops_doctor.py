"""The `visdet-ops` console script ([project.scripts] in pyproject.toml): runs visdet_ops.doctor.main.

A top-level module of the wheel, outside the visdet_ops package, on purpose: importing any module of a package runs
the package's __init__ first, and visdet_ops/__init__.py raises when the compiled ops cannot load (a torch
mismatch, a broken build), which is exactly when the doctor is needed. So main() says that it is running (RUNNING)
before it imports the package, and visdet_ops/__init__.py, finding this module in sys.modules with RUNNING set,
keeps the load error in visdet_ops.LOAD_ERROR for the doctor to report instead of raising it. Importing this
module alone changes nothing: only a running main() does.
"""

from __future__ import annotations

# True while main() runs; visdet_ops/__init__.py reads it (sys.modules["visdet_ops_doctor"].RUNNING).
RUNNING = False


def main(argv: list[str] | None = None) -> int:
    """`visdet-ops doctor [--json]`: the exit status of visdet_ops.doctor.main (argv: sys.argv[1:] when None)."""
    global RUNNING
    RUNNING = True
    try:
        from visdet_ops.doctor import main as doctor_main

        return doctor_main(argv)
    finally:
        RUNNING = False
