"""``python -m kvsim.cli`` is the ``kvsim`` command."""

import sys

from kvsim.cli.dispatch import main

sys.exit(main())
