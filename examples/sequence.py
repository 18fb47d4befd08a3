"""A small sequence model: an LSTM learns to continue sine waves (issue 15).

Each step feeds a batch of 16 noisy sine waves of random frequency and phase, 24
samples long; a 1-layer `nn.LSTM(1, 32, batch_first=True)` and a `Linear(32, 1)` read
them and predict every next sample (MSE, Adam). The LSTM's time loop is one `tg.for`
(not 24 copies of the cell), differentiated by `tg-autodiff`'s reverse loop; the
whole training loop runs on the backend. Run with `python examples/sequence.py`; it
prints the loss falling.
"""

import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for, manual_seed
from gradfuse.nn import LSTM, Adam, Linear, Module, MSELoss

STEPS, BATCH, LENGTH, HIDDEN = 300, 16, 24, 32
manual_seed(0)
rng = np.random.default_rng(0)


def waves() -> np.ndarray:
    """[BATCH, LENGTH + 1, 1] noisy sines: inputs are [:, :-1], targets [:, 1:]."""
    freq = rng.uniform(0.2, 0.6, size=(BATCH, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(BATCH, 1))
    t = np.arange(LENGTH + 1)[None, :]
    x = np.sin(freq * t + phase) + rng.normal(0, 0.02, size=(BATCH, LENGTH + 1))
    return x[..., None].astype(np.float32)


class Forecaster(Module):
    def __init__(self):
        super().__init__()
        self.lstm = LSTM(1, HIDDEN, batch_first=True)
        self.head = Linear(HIDDEN, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


model = Forecaster()
opt = Adam(model.parameters(), lr=0.01)
loss_fn = MSELoss()
losses: list[float] = []


def step() -> None:
    opt.zero_grad()
    batch = Feeder(waves, shape=[BATCH, LENGTH + 1, 1], name="waves")
    loss = loss_fn(model(batch[:, :-1]), batch[:, 1:])
    loss.backward()
    opt.step()
    Receiver(lambda v: losses.append(float(v)), loss, name="loss")


ir_for(range(STEPS), step)
print(f"recorded: {gradfuse.ir_text().count('tg.for')} loops (training, LSTM)")
execute()
for i in range(0, STEPS, 50):
    print(f"step {i:3d}: loss {np.mean(losses[i : i + 50]):.5f} (mean of 50 steps)")
assert np.mean(losses[-50:]) < 0.2 * np.mean(losses[:50]), "the loss did not fall"
