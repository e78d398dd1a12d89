"""``python -m kvsim`` is the ``kvsim`` command."""

import sys

from kvsim.cli.dispatch import main

sys.exit(main())
