"""Passes that make and transform kernel IR, one a file named after its flag:

| file                      | flag                   | what it does                              |
|---------------------------|------------------------|-------------------------------------------|
| `convert_tg_to_kernel.py` | `convert-tg-to-kernel` | `tg.fusion` regions become kernels over buffers, host ops kernel host ops |
| `squeeze.py`              | `kernel-squeeze`       | kernel domains lose their dims of size 1  |
| `fuse_rows.py`            | `kernel-fuse-rows`     | runs of row-wise kernels become one `kernel.rows` |
| `split_dims.py`           | `kernel-split-dims`    | dims read as `d floordiv c`, `d mod c` become two dims |
| `tile.py`                 | `kernel-tile`          | marks contractions to tile through shared memory |
| `block_reduce.py`         | `kernel-block-reduce`  | long reductions with few outputs go to whole blocks |
| `plan_buffers.py`         | `kernel-plan-buffers`  | every temporary gets its offset in one arena |

    ir-opt model.tg -p kernels,kernel-plan-buffers -t kernels
"""
