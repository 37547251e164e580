"""`python -m visdet_ops doctor [--json]`: the doctor, as the `visdet-ops` console script runs it.

When the compiled ops could not load, visdet_ops/__init__.py kept the error (LOAD_ERROR) because the package was
imported to run this module; only the doctor runs without the ops, so anything else raises that error, the one a
plain `import visdet_ops` gives.
"""

import sys

from . import LOAD_ERROR
from .doctor import main

if LOAD_ERROR is not None and sys.argv[1:2] != ["doctor"]:
    raise LOAD_ERROR
sys.exit(main())
