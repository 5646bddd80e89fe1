"""Compatibility names: the chain Viterbi moved to :mod:`ssvm_torch.chain` (one package for every
chain dynamic program). ``ssvm_torch.oracles.viterbi.decode`` / ``viterbi`` / ``viterbi_ragged`` /
``viterbi_loop`` / ``check_chain`` keep working and are the same functions as
:func:`ssvm_torch.chain.decode` and its siblings; new code imports from :mod:`ssvm_torch.chain`."""
from ..chain.numba_viterbi import viterbi_ragged
from ..chain.padded import check_chain, decode, viterbi
from ..chain.torch_viterbi import viterbi_loop

__all__ = ["check_chain", "decode", "viterbi", "viterbi_loop", "viterbi_ragged"]
