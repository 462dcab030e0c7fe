"""``python -m acpfsm.tools.conform``: the same as ``acpfsm conform``."""

import sys

from .cli import main

sys.exit(main())
