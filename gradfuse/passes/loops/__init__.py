"""Passes that make and transform loop nests for the CPU (the `cpu` pipeline):

| file                         | flag                      | what it does                        |
|------------------------------|---------------------------|-------------------------------------|
| `convert_kernel_to_loops.py` | `convert-kernel-to-loops` | kernels become `func.func`s of `scf.parallel`/`scf.for` nests |
| `loops_distribute.py`        | `loops-distribute`        | row nests that share a weight run phase by phase |
| `loops_interchange.py`       | `loops-interchange`       | the lanes' dim innermost; channel loops inside the taps |
| `loops_pack.py`              | `loops-pack`              | operands read across the lanes copied into loop order |
| `loops_trim_taps.py`        | `loops-trim-taps`         | tap loops bounded by the output point: no reads of padding |
| `loops_coalesce.py`          | `loops-coalesce`          | an elementwise nest's short trailing dims made one, for lanes |
| `loops_vectorize.py`         | `loops-vectorize`         | one loop per nest runs in SIMD lanes   |
| `loops_unroll_jam.py`        | `loops-unroll-jam`        | reduction nests run in register blocks (`jam.py`) |
| `loops_transpose_writes.py`  | `loops-transpose-writes`  | 8 x 8 tiles written across the lanes stored by rows |
| `loops_transpose_reads.py`   | `loops-transpose-reads`   | 16 lanes gathered across a block: loaded whole, shuffled |
| `loops_pack_tiles.py`        | `loops-pack-tiles`        | a large copy made block by block in the nest that reads it |
| `loops_parallelize.py`       | `loops-parallelize`       | nests with enough work run on OpenMP threads |

`pack_copy.py`: the copy nests of `loops-pack` (tile-major where the nest runs in
tiles) and `loops-pad`. `loop_ir.py`: what they share with the C backend (the
attributes that carry their decisions, `int_constant`, `depends`).

    ir-opt model.tg -p cpu
"""
