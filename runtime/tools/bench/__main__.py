"""``python -m acpfsm.tools.bench``."""

from .run import main

raise SystemExit(main())
