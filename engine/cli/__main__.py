"""``python -m engine.cli``: the ``chmm`` command line."""

import sys

from engine.cli import main

sys.exit(main())
