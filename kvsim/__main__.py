"""``python -m kvsim`` is the ``kvsim`` command."""

import sys

from kvsim.cli import main

sys.exit(main())
