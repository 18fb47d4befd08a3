"""The three interpreters, one per IR level, each a `runner.Interpreter`: the function
`run(module, *, args, feeders, receivers, params, entry, check_finite) -> RunResult`.

| module    | runs                                   | function      | backend     |
|-----------|----------------------------------------|---------------|-------------|
| `tg`      | tg IR, op by op on NumPy (the oracle)  | `run`         | `reference` |
| `kernel`  | kernel IR, whole grids at once on NumPy| `run_kernels` | `numpy`     |
| `lowered` | gpu/scf/memref IR, thread by thread    | `run_lowered` | `lowered`   |

`tg_ops`, `tg_conv` and `tg_sparse` hold the tg interpreter's `@impl`s (the
elementwise arithmetic comes from `dialects.tg_elementwise.SEMANTICS`), `lowered_ops`
and `lowered_lockstep` the lowered one's. The compiled backends (`c`, `cuda`) import
none of them.

    from gradfuse.backend.interpreters.tg import run
    run(module, feeders={"x": x}).results
"""
