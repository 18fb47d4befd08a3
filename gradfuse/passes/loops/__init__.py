"""Passes that make and transform loop nests for the CPU (the `cpu` pipeline):

| file                         | flag                      | what it does                        |
|------------------------------|---------------------------|-------------------------------------|
| `convert_kernel_to_loops.py` | `convert-kernel-to-loops` | kernels become `func.func`s of `scf.parallel`/`scf.for` nests |
| `loops_vectorize.py`         | `loops-vectorize`         | one loop per nest runs in SIMD lanes   |
| `loops_parallelize.py`       | `loops-parallelize`       | nests with enough work run on OpenMP threads |

`loop_attrs.py` names the attributes by which they hand their decisions to the C backend.

    ir-opt model.tg -p cpu
"""
