"""pytest support for acpfsm: ``acpfsm.testing``.

Two pytest plugins, registered through ``pytest11`` entry points (active once acpfsm is
installed; disable with ``-p no:acpfsm`` / ``-p no:acpfsm_coverage``):

* :mod:`acpfsm.testing.plugin` (``acpfsm``): the ``acpfsm_reference`` and
  ``acpfsm_reference_factory`` fixtures (the embedded reference agent in a Runtime, with its
  fault vocabulary) and ``--acpfsm-check-traces`` (every trace a test produces is replayed
  against the charts; a violation fails the test);
* :mod:`acpfsm.testing.coverage_plugin` (``acpfsm_coverage``): the transition-coverage report,
  ``--acpfsm-transition-coverage=PCT``.

:class:`ReferenceAgent` and :func:`assert_trace_conforms` are also usable without pytest.
Importing this package imports nothing else from acpfsm.
"""

from .reference import ReferenceAgent as ReferenceAgent
from .reference import TraceViolationError as TraceViolationError
from .reference import assert_trace_conforms as assert_trace_conforms
from .reference import format_violations as format_violations

__all__ = ["ReferenceAgent", "TraceViolationError", "assert_trace_conforms", "format_violations"]
