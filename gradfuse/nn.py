"""`gradfuse.nn`: modules, losses and optimizers (re-exported from `gradfuse.frontend.nn`,
whose `__all__` is the list).

from gradfuse.nn import Conv2d, BatchNorm2d, Linear, Sequential, Sigmoid, SGD
import gradfuse.nn.functional as F
gradfuse.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
from gradfuse.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
"""

import sys

from gradfuse.frontend import nn as _nn
from gradfuse.frontend.nn import *  # noqa: F403 (the package's public names, as listed)

__all__ = list(_nn.__all__)

sys.modules[f"{__name__}.functional"] = _nn.functional  # `import gradfuse.nn.functional as F`
sys.modules[f"{__name__}.utils"] = _nn.utils  # `from gradfuse.nn.utils import clip_grad_norm_`
sys.modules[f"{__name__}.utils.rnn"] = _nn.utils.rnn  # `from gradfuse.nn.utils.rnn import ...`
sys.modules[f"{__name__}.init"] = _nn.init  # `import gradfuse.nn.init as init`
