"""No silent misuse of the recording API: compile() then execute(), an empty execute(),
backward() twice, and load_state_dict() that fails half-way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradfuse
import gradfuse.backend
from gradfuse import Feeder, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import SGD, Linear, ReLU, Sequential

X = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)


def record_steps(model: Sequential, steps: int = 3) -> None:
    """`steps` SGD steps of mean((model(X))**2) into the current program."""
    opt = SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        (model(Feeder(X, shape=[4, 3])) ** 2).mean().backward()
        opt.step()

    ir_for(range(steps), step)


def trained(steps: int = 3) -> dict[str, np.ndarray]:
    """The params after `steps` steps run by a plain `execute()` (the expected values)."""
    gradfuse.manual_seed(1)
    model = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    record_steps(model, steps)
    execute("reference")
    return model.state_dict()


def test_compile_then_execute_runs_the_compiled_program(monkeypatch: pytest.MonkeyPatch) -> None:
    want = trained()
    gradfuse.manual_seed(1)
    model = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    before = model.state_dict()
    record_steps(model)
    compiles: list[str] = []
    real = gradfuse.backend.compile_module

    def counting(module: Any, backend: str | None = None, pipeline: str | None = None) -> Any:
        compiles.append(str(backend))
        return real(module, backend, pipeline)

    monkeypatch.setattr(gradfuse.backend, "compile_module", counting)
    program = gradfuse.compile("reference")
    assert program.kernels_per_iteration > 0
    assert gradfuse.compile("reference") is program  # unchanged recording: the same program
    execute("reference")
    assert compiles == ["reference"]  # execute() reused it
    state = model.state_dict()
    assert not np.allclose(state["0.weight"], before["0.weight"])  # it trained
    for key, value in want.items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)
    with pytest.raises(GradfuseError, match="nothing is recorded"):
        execute("reference")  # the run consumed the recording


def test_recording_more_after_compile_compiles_again() -> None:
    want = trained(3)
    gradfuse.manual_seed(1)
    model = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    record_steps(model, 1)
    first = gradfuse.compile("reference")
    record_steps(model, 2)  # the program changed: 1 + 2 steps now
    second = gradfuse.compile("reference")
    assert second is not first
    execute("reference")
    for key, value in want.items():
        np.testing.assert_allclose(model.state_dict()[key], value, rtol=1e-6, err_msg=key)


def test_execute_with_nothing_recorded_is_one_sentence() -> None:
    with pytest.raises(GradfuseError, match="nothing is recorded") as info:
        execute("reference")
    assert "test_api_semantics.py" in str(info.value)  # the user's line
    with pytest.raises(GradfuseError, match="nothing is recorded"):
        gradfuse.compile("reference")


def test_backward_twice_through_one_graph_is_an_error() -> None:
    model = Linear(3, 2)
    loss = (model(Feeder(X, shape=[4, 3])) ** 2).mean()
    loss.backward()
    with pytest.raises(GradfuseError, match="backward through the graph a second time"):
        loss.backward()
    h = model(Feeder(X, shape=[4, 3]))
    h.sum().backward()
    with pytest.raises(GradfuseError, match="retain_graph=True"):
        (h * h).mean().backward()  # shares h's graph with the first


def test_retain_graph_and_separate_graphs_accumulate_as_in_pytorch() -> None:
    """retain_graph=True allows a second backward; two forward passes give two graphs whose
    gradients add up in .grad (the GAN pattern): both as PyTorch computes them."""
    torch = pytest.importorskip("torch")
    model = Linear(3, 2)
    tmodel = torch.nn.Linear(3, 2)
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    opt = SGD(model.parameters(), lr=0.5)
    other = X[::-1].copy()

    loss = (model(Feeder(X, shape=[4, 3])) ** 2).mean()
    loss.backward(retain_graph=True)
    loss.backward()  # the graph was retained: the gradient doubles
    (model(Feeder(other, shape=[4, 3])).sum()).backward()  # a second forward pass
    opt.step()
    execute("reference")

    tloss = (tmodel(torch.tensor(X)) ** 2).mean()
    tloss.backward(retain_graph=True)
    tloss.backward()
    tmodel(torch.tensor(other)).sum().backward()
    with torch.no_grad():
        for p in tmodel.parameters():
            p -= 0.5 * p.grad
    for key, value in tmodel.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[key], value.numpy(), rtol=1e-5, atol=1e-6)


def test_backward_after_an_optimizer_step_is_a_new_graph() -> None:
    """Each step of a loop (and each step recorded one after another) has its own graph."""
    model = Linear(3, 2)
    opt = SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(Feeder(X, shape=[4, 3])).sum().backward()
        opt.step()
    execute("reference")


def test_load_state_dict_checks_every_entry_before_writing() -> None:
    model = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    before = model.state_dict()
    state = {k: v + 1.0 for k, v in before.items()}
    state["2.weight"] = np.zeros((2, 4), np.float32)  # the last entry is wrong
    with pytest.raises(GradfuseError, match=r"2\.weight has shape \[2, 4\] .* \[2, 5\]"):
        model.load_state_dict(state)
    for key, value in model.state_dict().items():  # nothing was overwritten
        np.testing.assert_array_equal(value, before[key], err_msg=key)
    state["2.weight"] = np.array([["a"] * 5] * 2)
    with pytest.raises(GradfuseError, match="2.weight holds"):
        model.load_state_dict(state)
    with pytest.raises(GradfuseError, match=r"missing keys \['2.bias'\]"):
        model.load_state_dict({k: v for k, v in before.items() if k != "2.bias"})
    partial = {"0.bias": before["0.bias"] + 2.0}
    model.load_state_dict(partial, strict=False)
    np.testing.assert_array_equal(model.state_dict()["0.bias"], partial["0.bias"])
    model.load_state_dict({k: v.astype(np.float64) for k, v in before.items()})
    assert model.state_dict()["0.weight"].dtype == np.float32


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_a_run_starts_from_copies_and_hands_its_final_params_to_the_model(backend: str) -> None:
    """A run copies the params it starts from: an array the model held before is left
    as it was. Its final params become the model's arrays (no second copy: ResNet-18's
    45 MB a run), as PyTorch's `state_dict()` shares memory with the parameters."""
    want = trained()
    gradfuse.manual_seed(1)
    model = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    weight = model[0].weight
    held = weight.data
    kept = held.copy()
    record_steps(model)
    result = execute(backend)
    np.testing.assert_array_equal(held, kept)  # the run did not write the model's array
    assert weight.data is not held
    assert np.shares_memory(weight.data, result.params[weight.key_hint()])
    np.testing.assert_allclose(weight.data, want["0.weight"], rtol=1e-5, atol=1e-6)  # (`agree`)
