"""The process-wide communicator that terse.ddp's states, terse.fsdp's comms and terse's
optimizers use when they are given none (public as terse.ddp.default_communicator and
terse.ddp.shutdown, docs/pytorch.md).

One per process: each creation is a rendezvous on the same store address, so a second live
communicator would find the port taken.
"""
import threading

from .comm import Communicator

__all__ = ["default_communicator", "shutdown"]

_default = None
_lock = threading.Lock()


def default_communicator():
    """The process-wide communicator, created on first use (collective: every rank must get
    here, as with init_process_group)."""
    global _default
    with _lock:
        if _default is None:
            _default = Communicator()
        return _default


def shutdown():
    """Closes the process-wide communicator (every rank, after its last reduction). Optional: the
    process exiting closes it too; a later use creates a new one."""
    global _default
    with _lock:
        if _default is not None:
            _default.close()
            _default = None
