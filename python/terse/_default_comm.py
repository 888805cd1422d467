"""The process-wide communicator that terse.ddp's states, terse.fsdp's comms and terse's
optimizers use when they are given none (public as terse.ddp.default_communicator and
terse.ddp.shutdown, docs/pytorch.md).

One per process: each creation is a rendezvous on the same store address, so a second live
communicator would find the port taken.
"""
import threading

from .comm import Communicator

__all__ = ["default_communicator", "shrink_default", "shutdown"]

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


def shrink_default(exclude=()):
    """After a failure: shrinks the process-wide communicator (``Communicator.shrink``, every
    survivor alike), makes the new one the process-wide one and returns (new, old). The old one
    stays open until the caller has moved its states over (``TerseState.shrink``,
    ``TerseFSDP.shrink``) and closes it then: they finish what they queued on it first."""
    global _default
    with _lock:
        if _default is None:
            raise ValueError("terse: there is no process-wide communicator to shrink")
        old = _default
        _default = old.shrink(exclude)
        return _default, old
