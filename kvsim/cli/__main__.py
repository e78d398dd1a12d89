"""``python -m kvsim.cli`` is the ``kvsim`` command."""

import sys

from kvsim.cli import main

sys.exit(main())
