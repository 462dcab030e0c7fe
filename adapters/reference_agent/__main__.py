"""``python -m acpfsm.adapters.reference_agent``: run the reference agent on stdio."""

from ._cli import main

raise SystemExit(main())
