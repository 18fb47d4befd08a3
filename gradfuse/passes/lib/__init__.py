"""Helpers of the passes, none a pass itself (no flag):

- for `tg-autodiff` and `tg-decompose`: `derivatives` (the derivative rule of every tg
  op, `RULES`) and `conv` (convolutions as contractions over guarded views);
- for `tg-fuse` and `convert-tg-to-kernel`: `fusion` (the planner: which ops share a
  kernel), `fusion_graph` (its groups and how values are read through views),
  `fusion_levels` (launch order, horizontal fusion) and `kernel_body` (a group's
  members as scalar ops over loads and stores);
- for `convert-kernel-to-gpu`: `gpu_func` (a launch's frame), `kernel_lowering`,
  `rows_lowering`, `tile_lowering` and `block_reduce_lowering` (one kind of launch
  each into a `gpu.func` body), `fast_ops` (upstream ops built fast);
- for `canonicalize`, `cse`, `dce`: `op_facts` (what xDSL's drivers ask of each op).

    from gradfuse.passes.lib.derivatives import RULES
"""
