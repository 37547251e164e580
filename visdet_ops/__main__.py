import sys

from .doctor import main

sys.exit(main())
