"""The c backend building a program a group of kernels at a time (`build_by_kernels`):
the `cpu` pipeline's loop passes run on one group while gcc compiles the groups before.
The program, its IR and its library are those of the whole pipeline run at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from compiled import agree  # tests/unit

from gradfuse.backend import compile_module
from gradfuse.backend.c.cache import library_path
from gradfuse.backend.c.host import build_by_kernels, render_program
from gradfuse.backend.c.loop_render import LoopRenderer
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import kernel_tail, run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c_backend import PROGRAMS, inputs  # noqa: E402


def test_the_cpu_pipeline_splits_after_its_loop_lowering():
    head, tail = kernel_tail("cpu")
    assert head.endswith(",convert-kernel-to-loops")
    assert tail.startswith("canonicalize,cse,loops-") and "loops-unroll-jam" in tail
    assert kernel_tail("default") == ("default", "")  # its last pass is not function-local
    assert kernel_tail("cpu,tg-fuse")[1] == ""


@pytest.mark.parametrize("name", ["mlp", "linreg"])
def test_kernels_built_a_group_at_a_time_give_the_whole_pipelines_program(
    name, monkeypatch, tmp_path
):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    whole, grouped = parse_tg(PROGRAMS[name]), parse_tg(PROGRAMS[name])
    run_pipeline(whole, "cpu{jam-work=0}")
    head, tail = kernel_tail("cpu{jam-work=0}")
    run_pipeline(grouped, head)
    kernels = sum(1 for op in grouped.ops if "gradfuse.kernel" in op.attributes)
    assert kernels >= 2
    host, path = build_by_kernels(grouped, tail, 1)  # one kernel a group
    assert str(grouped) == str(whole)
    assert host.source == render_program(whole).source
    assert path == library_path(host.source) and path.exists()
    assert len(list(tmp_path.glob("c/*.o"))) == kernels + 1  # each group's, and the host's
    assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]  # no temporaries left


def test_a_program_built_by_groups_runs_as_the_reference_and_a_second_build_runs_no_gcc(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("gradfuse.backend.c.GROUP", 1)  # small programs by groups too
    agree(PROGRAMS["mlp"], "c", pipeline="cpu", **inputs("mlp"))

    def no_gcc(*args, **kwargs):
        raise AssertionError(f"gcc ran: {args[0]}")

    monkeypatch.setattr(subprocess, "Popen", no_gcc)
    monkeypatch.setattr(subprocess, "run", no_gcc)
    agree(PROGRAMS["mlp"], "c", pipeline="cpu", **inputs("mlp"))  # objects and library cached


def test_a_group_that_gcc_fails_on_names_its_kernel_and_leaves_no_library(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("gradfuse.backend.c.GROUP", 1)
    real = LoopRenderer.kernel

    def broken(self, fn):
        text = real(self, fn)
        return text.replace("k1(", "k1(no_such_type q, ", 1)

    monkeypatch.setattr(LoopRenderer, "kernel", broken)
    with pytest.raises(GradfuseError) as info:
        compile_module(parse_tg(PROGRAMS["linreg"]), "c", pipeline="cpu")
    message = str(info.value)
    assert "gcc failed on kernel k1 (fused from <string>:" in message and "no_such_type" in message
    kept = Path(message.rsplit("source: ", 1)[1].splitlines()[0])
    assert kept.exists() and "no_such_type" in kept.read_text()
    assert not list(tmp_path.glob("c/*.so"))  # no cache entry for a failed build
    assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]


def test_a_failed_unit_stops_the_others_and_the_next_add_raises(monkeypatch, tmp_path):
    """gcc runs in worker threads: a unit that fails is reported by the next `add` (or
    by `link`), and closing leaves no temporaries; a program in several units
    (`build_library`) that fails keeps none either."""
    import time

    from gradfuse.backend.c import cache

    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    units = cache.Units()
    units.add("int broken(void) { return }\n")
    deadline = time.monotonic() + 60
    while units.failed is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(cache.UnitFailed):
        units.add("int fine(void) { return 1; }\n")
    units.close()
    assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]

    good, bad = "int one(void) { return 1; }\n", "int two(void) { return }\n"
    with pytest.raises(GradfuseError, match="gcc"):
        cache.build_library(
            good + bad, split=lambda cores: [good, bad, good.replace("one", "three")]
        )
    assert not list(tmp_path.glob("c/*.so"))
    assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]


def test_two_processes_building_one_program_compile_each_unit_once(tmp_path):
    """Two processes that build the same program at once (the ranks of `mpirun -n 2`
    on one machine) share its translation units: a unit another process is compiling
    (its build lock held) is waited for, not compiled again. gcc is wrapped to log each
    compile and to take a second over it, so that the two builds overlap."""
    log = tmp_path / "gcc.log"
    wrapper = tmp_path / "slow-gcc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -c "*) echo "$*" >> ' + str(log) + "; sleep 1;; esac\n"
        'exec gcc "$@"\n'
    )
    wrapper.chmod(0o755)
    script = (
        "from gradfuse.backend.c.cache import build_library\n"
        "units = [f'int unit{k}(void) {{ return {k}; }}\\n' for k in range(4)]\n"
        "print(build_library(''.join(units), split=lambda cores: units))\n"
    )
    env = {**os.environ, "GRADFUSE_CACHE_DIR": str(tmp_path / "cache"), "CC": str(wrapper)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate()[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] and Path(outs[0]).read_bytes()[:4] == b"\x7fELF"
    compiled = [line.split()[-1] for line in log.read_text().splitlines()]
    assert len(compiled) == 4, compiled  # each unit once, by one process or the other
    assert len({Path(c).name for c in compiled}) == 4
