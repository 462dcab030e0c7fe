"""acpfsm's tools, kept apart from the runtime core: the ``acpfsm`` command line, the demo, the
benchmark, the trace checker, diagram rendering and the conformance battery.

The runtime core (the facade, the drivers, hub, trace, history, errors, types) never imports
from here; the tools use the core like any application does.
"""
