"""pytest support for acpfsm (plugins, fixtures)."""
