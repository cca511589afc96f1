"""A Ray job standing in for a long training run in the browser tests ("a full 5,000-step curve in each
of the three front-ends"). It prints the runtime's own event lines (cleverthis_runtime.events, checked against
the event models) for STEPS steps, so the curve travels the real path: Ray's job log, the service's event store,
`GET .../metrics` downsampled, then each front-end. 5,000 real steps would cost minutes of CPU per run."""

from __future__ import annotations

import math
import os

from cleverthis_runtime import events

STEPS = int(os.environ.get("CLEVERTHIS_TEST_CURVE_STEPS") or 5000)


def loss_at(step: int) -> float:
    """A decaying loss with some wiggle: every step's point is distinct."""
    return round(0.3 + 2.2 * math.exp(-step / 1500) + 0.05 * math.sin(step / 7), 6)


def main() -> None:
    events.set_source("driver")
    events.emit("phase", phase="initializing", pid=os.getpid())
    events.emit("phase", phase="running", total_steps=STEPS, epochs=1, start_epoch=0, start_step=0)
    events.set_source("rank0")
    for step in range(1, STEPS + 1):
        events.emit("step", step=step, total_steps=STEPS, epoch=step / STEPS, loss=loss_at(step),
                    learning_rate=1e-4)
    events.set_source("driver")
    events.emit("phase", phase="succeeded")


if __name__ == "__main__":
    main()
