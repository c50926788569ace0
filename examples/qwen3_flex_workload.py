"""An external workload on transformers' own flex integration, trained from threads: its roles.

transformers' Qwen3ForCausalLM with `attn_implementation="flex_attention"` (set through its
config): a team's trainer racegate has never seen, gated through racegate's workload interface
(`from racegate import ...`, docs/workload.md) without importing anything from racegate.model.
Its strategies:

- `singleton` (its positive control, the known-bad one): transformers' own process-global
  compiled flex (`WrappedFlexAttention`), compiled lazily by whichever thread calls it first and
  shared by every thread, the block mask compiled lazily too (transformers' `create_block_mask`);
- `compiled_upfront` (its production strategy, a strategy of its own with its spec below): the
  same compiled flex, compiled and warmed up on every shape in one thread before the threads
  start (the harness's warm-up, then `fail_on_recompile`), each replica's causal block masks
  built up front, and each compiled call under one process-wide lock (dynamo's cache lookup is
  not safe across threads: results/guard-lookup-spurious-miss);
- `processes`: one process per worker (racegate's), each compiling its own flex lazily.

flex_attention has no CPU backward: on CPU a step is the forward and its loss, under no_grad
(still compiled, still threaded: the tracing race is in the forward). Run it (docs/your-trainer.md):
`python -m racegate run --workload examples.qwen3_flex_workload:make_workload` (preset tiny on
CPU, small on a GPU).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers import AttentionInterface, Qwen3Config, Qwen3ForCausalLM
from transformers.integrations.flex_attention import flex_attention_forward

from racegate import StepResult, StrategySpec, WorkloadRoles

# Named as racegate's defaults (tiny on CPU, small on GPU), so a plain command picks them.
SIZES = {
    "tiny": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=128,
    ),
    "small": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        vocab_size=8192,
    ),
}
SEQ_LENS = {"tiny": (32, 48), "small": (256, 384)}  # bucket 0 is steady state; 1 makes a recompile
BATCH = {"tiny": 2, "small": 4}

STRATEGIES = ("singleton", "compiled_upfront", "processes")
# compiled_upfront is this workload's own name: its spec says what it is
# (racegate.harness.scenario.vocab).
COMPILED_UPFRONT = StrategySpec(
    compiled=True,
    warmed_up=True,  # the harness steps every shape once in one thread, then fail_on_recompile
    locked=True,
    one_process_per_worker=False,
    counts_fallbacks=False,
    trains_on_cpu=True,  # forward only on CPU (no flex backward there), as every strategy here
    in_suite=True,
    races_lazily=False,
)
ROLES = WorkloadRoles(
    production="compiled_upfront",
    control="singleton",
    strategies={"compiled_upfront": COMPILED_UPFRONT},
)

LOCKED_FLEX = "racegate_locked_flex"  # transformers' flex_attention_forward, one call at a time
_flex_lock = threading.Lock()


def _locked_flex(*args: object, **kwargs: object) -> object:
    with _flex_lock:
        return flex_attention_forward(*args, **kwargs)


AttentionInterface.register(LOCKED_FLEX, _locked_flex)


def _causal(b: int, h: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


class Qwen3FlexReplica:
    def __init__(self, device: torch.device, strategy: str, seed: int, preset: str) -> None:
        torch.manual_seed(seed)
        config = Qwen3Config(**SIZES[preset], max_position_embeddings=max(SEQ_LENS[preset]))
        # transformers' own flex integration, chosen through the config; compiled_upfront calls
        # the same function under a lock (registered above as LOCKED_FLEX).
        config._attn_implementation = (
            LOCKED_FLEX if strategy == "compiled_upfront" else "flex_attention"
        )
        self.device = device
        self.train = device.type != "cpu"  # flex has no CPU backward: forward only there
        dtype = torch.bfloat16 if self.train else torch.float32
        self.model = Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
        self.model.train(self.train)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if self.train else None
        self.vocab = config.vocab_size
        self.seq_lens = SEQ_LENS[preset]
        self.batch = BATCH[preset]
        # compiled_upfront: every bucket's causal mask built now, uncompiled, in the thread that
        # builds the replica; the others let transformers build (and compile) it per call.
        self.masks: dict[int, BlockMask] = {}
        if strategy == "compiled_upfront":
            for shape, t in enumerate(self.seq_lens):
                self.masks[shape] = create_block_mask(
                    _causal, None, None, t, t, device=str(device), _compile=False
                )

    def step(self, shape: int) -> StepResult:
        ids = torch.randint(0, self.vocab, (self.batch, self.seq_lens[shape]), device=self.device)
        kwargs = {"attention_mask": self.masks[shape]} if shape in self.masks else {}
        if not self.train:
            with torch.no_grad():
                loss = self.model(input_ids=ids, labels=ids, **kwargs).loss
            return StepResult(tokens=ids.numel(), loss=float(loss))
        loss = self.model(input_ids=ids, labels=ids, **kwargs).loss
        loss.backward()
        assert self.opt is not None
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return StepResult(tokens=ids.numel(), loss=float(loss))

    def eager_fallbacks(self) -> int:
        return 0  # transformers' flex cannot tell; racegate's throughput gate still applies


class Qwen3FlexWorkload:
    def __init__(self, preset: str) -> None:
        self.preset = preset
        self.name = f"qwen3-flex-{preset}"

    def roles(self) -> WorkloadRoles:
        return ROLES

    def strategies(self) -> Sequence[str]:
        return STRATEGIES

    def shapes(self) -> Sequence[int]:
        return list(range(len(SEQ_LENS[self.preset])))

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> Qwen3FlexReplica:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose from: {', '.join(STRATEGIES)}")
        return Qwen3FlexReplica(device, strategy, seed, self.preset)

    def flops_per_step(self, shape: int) -> float | None:
        return None  # unknown: no MFU


def make_workload(preset: str = "tiny") -> Qwen3FlexWorkload:
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; choose from: {', '.join(SIZES)}")
    return Qwen3FlexWorkload(preset)
