"""What each optimizer keeps per parameter: the one home of the names a workload, `simulate
--optimizer` and `recommend --optimizer` take, and of the state memory counts."""

from __future__ import annotations

#: State each optimizer keeps per parameter: SGD none, momentum its velocity, RMSProp its
#: squared-gradient average, Adam and LAMB (You et al. 2019, arXiv:1904.00962: Adam's
#: moments with a layer-wise trust ratio) two moments.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "rmsprop": 1, "adam": 2, "lamb": 2}
