"""terse from Python: the C API (libterse.so) through ctypes; a PyTorch DDP communication hook
(terse.ddp), OneBitAdam (terse.optim), FSDP2 comms (terse.fsdp) and the torch.distributed backend
"terse" (terse.backend, registered when imported), which import torch; the rest of the package
does not. docs/pytorch.md."""
from ._lib import TerseError, library_path, version
from .comm import Communicator, Feedback, canonical_spec, parse_feedback_header

__all__ = ["Communicator", "Feedback", "TerseError", "canonical_spec", "library_path",
           "parse_feedback_header", "version"]
__version__ = "0.1.0"
