"""`python -m coil.bench`: `coil bench`'s command line (coil.bench.cli)."""

import sys

from coil.bench.cli import main

sys.exit(main())
