"""Pipeline parallelism: the decoder layers split into stages, one per worker, driven by torch.distributed.pipelining.

`pipeline_parallel_size: N` (with `workers: N`) gives rank r the layers of stage r: the first stage also holds the
token embeddings, the last the final norm and the LM head. Every worker loads the model, then replaces the layers
and parts it does not own by a pass-through (`_Skip`), so a stage runs the model's own forward (its causal mask,
its rotary embeddings) over its own layers only. A batch is cut into `pipeline_microbatches` micro-batches and
run with torch's `ScheduleGPipe` (or `Schedule1F1B`): activations go forward and their gradients back over the
process group Ray Train made (gloo on CPU).

The HF Trainer still runs the loop (optimizer, schedule, accumulation, callbacks, checkpoints). What differs is in
`compat.trainer_class(pipeline)`: every rank reads the same batches; `training_step` runs the schedule (which does
the backward) and returns the loss the last stage computed to every rank; gradient clipping takes the norm over
all stages; the loss is the sum over the step's tokens divided by their number, as the Trainer's own loss.

Each rank holds only its stage's weights and optimizer states. A checkpoint gathers every stage's weights on
rank 0 (`gathered_state`), which writes one plain full `model.safetensors`.

Shapes: a stage learns its input's shape from the first micro-batch it runs (torch's metadata inference), and
batches are padded to their longest row, so one schedule is kept per batch shape (`_schedule`, the last few).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from .spec import TrainingConfig

#: Families whose stages were checked to compute the same logits as the whole model (tests/unit/test_pipeline.py).
#: Falcon and GPT-2 name their layers and parts otherwise (`h`, `ln_f`, `word_embeddings`/`wte`): not split yet.
FAMILIES = ("llama", "mistral", "mixtral", "gemma", "qwen2", "phi3")
SCHEDULES_KEPT = 8


def refusal(tc: TrainingConfig, model_config: Any) -> tuple[str, str] | None:
    """(field, why) when this model cannot be split into `pipeline_parallel_size` stages; None when it can."""
    pp = tc.pipeline_parallel_size
    if pp <= 1:
        return None
    family = getattr(model_config, "model_type", "this model")
    if family not in FAMILIES:
        return ("training_config.pipeline_parallel_size",
                f"{family} cannot be split into pipeline stages by this runtime (families it can split: "
                f"{', '.join(FAMILIES)}); set pipeline_parallel_size to 1 and use strategy 'fsdp' to shard it")
    if getattr(model_config, "tie_word_embeddings", False):
        return ("training_config.pipeline_parallel_size",
                f"this {family} model ties its input and output embeddings (tie_word_embeddings), one weight that "
                "the first and the last stage would both hold; set pipeline_parallel_size to 1")
    layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
    if layers < pp:
        return ("training_config.pipeline_parallel_size",
                f"pipeline_parallel_size {pp} is more than the model's {layers} decoder layers: each stage needs one")
    return None


def stage_layers(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """[lo, hi) of the decoder layers of each stage: as even as it goes, the first stages one more."""
    per, extra = divmod(num_layers, pp)
    out, lo = [], 0
    for r in range(pp):
        hi = lo + per + (1 if r < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def microbatches(tc: TrainingConfig, batch_size: int) -> int:
    """Micro-batches per batch: the configured number, else 2 per stage; never more than the batch's rows."""
    want = tc.pipeline_microbatches or 2 * tc.pipeline_parallel_size
    return max(1, min(want, batch_size))


def layout(tc: TrainingConfig, world: int, model_config: Any) -> dict[str, Any]:
    """For the `plan` and `strategy` events: which layers sit on which rank, the schedule, the micro-batches."""
    pp = tc.pipeline_parallel_size
    out: dict[str, Any] = {"mesh": {"pp": pp}, "mesh_dims": ["pp"], "schedule": tc.pipeline_schedule,
                           "microbatches": tc.pipeline_microbatches or 2 * pp}
    layers = getattr(model_config, "num_hidden_layers", None)
    if layers:
        out["stages"] = [{"rank": r, "layers": [lo, hi - 1], "embeddings": r == 0, "head": r == pp - 1}
                         for r, (lo, hi) in enumerate(stage_layers(int(layers), pp))]
    return out


def reason(tc: TrainingConfig, world: int) -> str:
    pp = tc.pipeline_parallel_size
    return (f"pipeline parallel: the decoder layers split into {pp} stages over ranks 0-{pp - 1}, "
            f"{tc.pipeline_schedule} schedule with {tc.pipeline_microbatches or 2 * pp} micro-batches per batch: "
            "set in training_config.json")


def split(lm: Any, rank: int, pp: int) -> Any:
    """This rank's stage of the causal LM `lm` (a `torch.nn.Module` whose forward takes the stage's input)."""
    import torch

    class _Skip(torch.nn.Module):
        """A part this stage does not own: its input passes through (a decoder layer's first argument)."""

        def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            return x

    class StageModule(torch.nn.Module):
        #: the Trainer then counts the tokens of each optimizer step (`num_items_in_batch`) for the loss
        accepts_loss_kwargs = True

        def __init__(self) -> None:
            super().__init__()
            self.lm, self.rank, self.pp = lm, rank, pp
            self.first, self.last = rank == 0, rank == pp - 1
            base = lm.get_decoder()
            lo, hi = stage_layers(len(base.layers), pp)[rank]
            for i in range(len(base.layers)):
                if not lo <= i < hi:
                    base.layers[i] = _Skip()
            self.layers = (lo, hi)
            if not self.last:
                base.norm = _Skip()
                lm.lm_head = _Skip()
            if not self.first:
                base.embed_tokens = _Skip()

        @property
        def config(self) -> Any:
            return self.lm.config

        def forward(self, x: Any) -> Any:
            base = self.lm.get_decoder()
            out = base(input_ids=x, use_cache=False) if self.first else base(inputs_embeds=x, use_cache=False)
            hidden = out.last_hidden_state
            return self.lm.lm_head(hidden) if self.last else hidden

        def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
            return self.lm.save_pretrained(*args, **kwargs)

        def gradient_checkpointing_enable(self, **kwargs: Any) -> Any:
            return self.lm.gradient_checkpointing_enable(**kwargs)

        def local_state(self) -> dict[str, Any]:
            """This stage's weights, under the whole model's names."""
            return {k: v.detach().cpu() for k, v in self.lm.state_dict().items()}

    return StageModule()


def is_stage(model: Any) -> bool:
    return type(model).__name__ == "StageModule" and hasattr(model, "local_state")


def gathered_state(model: Any) -> dict[str, Any] | None:
    """Collective: every stage's weights, merged on rank 0 (None on the other ranks)."""
    import torch.distributed as dist

    parts: list[Any] = [None] * model.pp if model.rank == 0 else []
    dist.gather_object(model.local_state(), parts if model.rank == 0 else None, dst=0)
    if model.rank != 0:
        return None
    full: dict[str, Any] = {}
    for part in parts:
        full.update(part)
    return full


class Pipeline:
    """The schedule over one rank's stage: a training step (forward and backward), a validation step, the norm."""

    def __init__(self, stage: Any, tc: TrainingConfig, batch_size: int, device: Any) -> None:
        self.stage, self.device = stage, device
        self.kind = tc.pipeline_schedule
        self.n_micro = microbatches(tc, batch_size)
        self.denominator = 1.0
        self._schedules: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def _loss(self, logits: Any, labels: Any) -> Any:
        """The micro-batch's share of the step's loss: its summed token losses over the step's token count."""
        import torch

        shifted = logits[:, :-1].reshape(-1, logits.size(-1)).float()
        return torch.nn.functional.cross_entropy(shifted, labels[:, 1:].reshape(-1), ignore_index=-100,
                                                 reduction="sum") / self.denominator

    def _schedule(self, shape: tuple[int, ...]) -> Any:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        if shape in self._schedules:
            self._schedules.move_to_end(shape)
            return self._schedules[shape]
        n = min(self.n_micro, shape[0])
        stage = PipelineStage(self.stage, self.stage.rank, self.stage.pp, self.device)
        cls = Schedule1F1B if self.kind == "1f1b" and n >= self.stage.pp else ScheduleGPipe
        schedule = cls(stage, n, loss_fn=self._loss, scale_grads=False)
        self._schedules[shape] = schedule
        if len(self._schedules) > SCHEDULES_KEPT:
            self._schedules.popitem(last=False)
        return schedule

    def _run(self, inputs: dict[str, Any], denominator: float, *, train: bool) -> Any:
        import torch
        import torch.distributed as dist

        ids = inputs["input_ids"].to(self.device)
        labels = inputs["labels"].to(self.device)
        self.denominator = max(1.0, float(denominator))
        schedule = self._schedule(tuple(ids.shape))
        losses: list[Any] = []
        run = schedule.step if train else schedule.eval
        if self.stage.first:
            run(ids)
        elif self.stage.last:
            run(target=labels, losses=losses)
        else:
            run()
        loss = torch.stack([x.detach() for x in losses]).sum() if losses else torch.zeros((), device=self.device)
        dist.broadcast(loss, src=self.stage.pp - 1)  # every rank logs what the last stage computed
        return loss

    def train_step(self, inputs: dict[str, Any], num_items_in_batch: Any) -> Any:
        """Forward and backward of one batch; `num_items_in_batch`: the Trainer's count of the optimizer step's
        tokens, which it summed over all ranks (each stage saw the same batch: divided by the stages)."""
        if num_items_in_batch is None:
            tokens = float(_tokens(inputs["labels"]))
        else:
            tokens = float(num_items_in_batch) / self.stage.pp
        return self._run(inputs, tokens, train=True)

    def eval_step(self, inputs: dict[str, Any]) -> Any:
        import torch

        with torch.no_grad():
            return self._run(inputs, float(_tokens(inputs["labels"])), train=False)

    def grad_norm(self, parameters: Any, max_norm: float) -> Any:
        """The gradient norm over every stage (each holds some of the weights); clipped to max_norm."""
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in parameters if p.grad is not None]
        local = torch.stack([g.detach().float().pow(2).sum() for g in grads]).sum() if grads \
            else torch.zeros((), device=self.device)
        dist.all_reduce(local)
        total = local.sqrt()
        if max_norm and math.isfinite(max_norm) and max_norm > 0:
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef)
        return total


def _tokens(labels: Any) -> int:
    return int((labels[:, 1:] != -100).sum())
