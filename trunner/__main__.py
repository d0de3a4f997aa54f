"""`python -m trunner`: the `trunner` command."""

import sys

from .cli import main

sys.exit(main())
