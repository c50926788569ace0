"""An external workload: a tiny Llama from transformers, trained from threads, compiled per device.

This is the "gate your own trainer" example (README): ~40 lines implementing racegate's
workload interface (`from racegate import StepResult`, docs/workload.md) without importing
anything from racegate.model. Run it:
`python -m racegate run --workload examples.llama_workload:make_workload --preset cpu`."""

from __future__ import annotations

import threading

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from racegate import StepResult

SIZES = {
    "cpu": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
    )
}
SEQ_LENS = (32, 48)  # bucket 0 is steady state; bucket 1 makes a recompile
BATCH = 2

# One compiled forward per device, shared by every thread on it: the incident's pattern.
_compiled: dict[torch.device, object] = {}
_compile_lock = threading.Lock()


class LlamaReplica:
    def __init__(self, device: torch.device, strategy: str, seed: int, size: str) -> None:
        torch.manual_seed(seed)
        config = LlamaConfig(**SIZES[size], attn_implementation="sdpa")
        self.device = device
        self.model = LlamaForCausalLM(config).to(device)
        self.forward = self.model.forward
        if strategy in ("per_device", "warmup"):
            with _compile_lock:
                # Every replica on a device shares its compiled module forward through the
                # wrapped function, so compile state is per device as in the incident's code.
                if device not in _compiled:
                    _compiled[device] = torch.compile(LlamaForCausalLM.forward)
            compiled = _compiled[device]
            self.forward = lambda **kw: compiled(self.model, **kw)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.vocab = config.vocab_size

    def step(self, shape: int) -> StepResult:
        ids = torch.randint(0, self.vocab, (BATCH, SEQ_LENS[shape]), device=self.device)
        loss = self.forward(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return StepResult(tokens=ids.numel(), loss=float(loss))

    def eager_fallbacks(self) -> int:
        return 0  # this trainer cannot tell; racegate's throughput gate still applies


class LlamaWorkload:
    name = "example-llama"

    def __init__(self, preset: str = "cpu") -> None:
        if preset not in SIZES:
            raise ValueError(f"unknown preset {preset!r}; choose from: {', '.join(SIZES)}")
        self.size = preset

    def strategies(self) -> list[str]:
        return ["per_device", "warmup", "eager"]

    def shapes(self) -> list[int]:
        return list(range(len(SEQ_LENS)))

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> LlamaReplica:
        if strategy not in self.strategies():
            raise ValueError(
                f"unknown strategy {strategy!r}; choose from: {', '.join(self.strategies())}"
            )
        return LlamaReplica(device, strategy, seed, self.size)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "cpu") -> LlamaWorkload:
    return LlamaWorkload(preset)
