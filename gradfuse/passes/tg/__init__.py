"""Passes on tg IR, one a file named after its flag:

| file              | flag              | what it does                                           |
|-------------------|-------------------|--------------------------------------------------------|
| `autodiff.py`     | `tg-autodiff`     | every `tg.grad` becomes its reverse-mode program       |
| `decompose.py`    | `tg-decompose`    | composites (sigmoid, softmax, conv2d...) become primitives |
| `loop_state.py`   | `tg-loop-state`   | loop-carried tensors become named state, like params   |
| `lower_access.py` | `tg-lower-access` | views become access maps (`tg.view`)                   |
| `fuse.py`         | `tg-fuse`         | fusion decisions: one `tg.fusion` region per kernel    |

    ir-opt model.tg -p tg-autodiff,tg-decompose
"""
