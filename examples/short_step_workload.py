"""An external trainer with steps of a few milliseconds: a plain-PyTorch model, compiled whole.

A small causal transformer (token embedding, pre-norm blocks, flex attention on a causal block
mask, an MLP, tied output head), written in plain PyTorch, the whole model under one
`torch.compile` with flex attention inside; a training step (forward, loss, backward, AdamW)
lasts a few milliseconds on a GPU. It names its own strategies and roles (racegate/harness/
scenario/workload_api.py), as a trainer racegate has never seen would:

- `lazy_threads` (its positive control, the known-bad one): each thread's replica compiles its
  model lazily, in its own thread, at its first step, while the other threads step: one
  thread's trace beside another's compiled calls, the cross-thread tracing race;
- `warmed_up` (its production strategy): the same compiled model, stepped on every shape in
  one thread before the threads start (racegate's warm-up, then `fail_on_recompile`), each
  compiled forward called under one process-wide lock: dynamo's cache lookup is not safe across
  threads (results/guard-lookup-spurious-miss), and the backward and the optimizer still run
  in the threads side by side;
- `processes`: one process per worker (racegate's topology), each compiling its own model.

flex_attention has no backward on CPU (torch >= 2.11 raises once a CPU input needs grad): on CPU
the attention is SDPA with `is_causal=True`, still inside the whole-model compile (backend
aot_eager there: BACKEND), so the threads still trace and call compiled code; on a GPU it is
flex_attention under inductor. Run it:
`python -m racegate run --workload examples.short_step_workload:make_workload
--strategies lazy_threads,warmed_up,processes` (preset tiny on CPU, small on a GPU).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from racegate.harness.scenario.vocab import StrategySpec
from racegate.harness.scenario.workload_api import StepResult, WorkloadRoles

SIZES = {  # width, layers, heads, vocab
    "tiny": dict(width=32, layers=2, heads=2, vocab=128),
    "small": dict(width=256, layers=2, heads=4, vocab=4096),
}
SEQ_LENS = {"tiny": (32, 48), "small": (128, 256)}  # bucket 0 is steady state; 1 recompiles
BATCH = {"tiny": 2, "small": 4}

STRATEGIES = ("lazy_threads", "warmed_up", "processes")
# Its own names: their specs say what they are (racegate.harness.scenario.vocab.StrategySpec).
LAZY_THREADS = StrategySpec(
    compiled=True,
    warmed_up=False,
    locked=False,
    one_process_per_worker=False,
    counts_fallbacks=False,
    trains_on_cpu=True,
    in_suite=True,
    races_lazily=True,  # compiles in a thread while others run compiled code
)
WARMED_UP = StrategySpec(
    compiled=True,
    warmed_up=True,  # racegate steps every shape once in one thread, then fail_on_recompile
    locked=True,  # the compiled forward under one process-wide lock
    one_process_per_worker=False,
    counts_fallbacks=False,
    trains_on_cpu=True,
    in_suite=True,
    races_lazily=False,
)
ROLES = WorkloadRoles(
    production="warmed_up",
    control="lazy_threads",
    strategies={"lazy_threads": LAZY_THREADS, "warmed_up": WARMED_UP},
)
_forward_lock = threading.Lock()  # warmed_up: one compiled forward at a time
# inductor on a GPU. On CPU aot_eager: dynamo and AOTAutograd trace as they do for inductor (the
# race is in that trace: make_fx sets the process-global FX flag), without inductor's C++ build
# of every kernel, minutes on a small loaded CPU box (a 2-core one: 4 min for this tiny model).
BACKEND = {"cuda": "inductor", "cpu": "aot_eager"}


def _causal(b: int, h: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: BlockMask | None) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        if mask is None:  # CPU: flex has no backward there
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = flex_attention(q, k, v, block_mask=mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, ids: torch.Tensor, mask: BlockMask | None) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask)
        logits = self.norm(x) @ self.embed.weight.T
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


class ShortStepReplica:
    def __init__(self, device: torch.device, strategy: str, seed: int, preset: str) -> None:
        torch.manual_seed(seed)
        self.device, self.strategy = device, strategy
        self.model = TinyLM(**SIZES[preset]).to(device)
        # The whole model compiled; nothing compiles until its first call (in whichever thread
        # makes it: the replica's own for lazy_threads and processes, racegate's warm-up thread
        # for warmed_up).
        self.compiled = torch.compile(self.model, dynamic=False, backend=BACKEND[device.type])
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.vocab, self.batch, self.seq_lens = (
            SIZES[preset]["vocab"],
            BATCH[preset],
            SEQ_LENS[preset],
        )
        # Each bucket's causal block mask, built now, uncompiled (a GPU has flex; CPU does not).
        self.masks: dict[int, BlockMask | None] = {
            shape: create_block_mask(_causal, None, None, t, t, device=str(device), _compile=False)
            if device.type == "cuda"
            else None
            for shape, t in enumerate(self.seq_lens)
        }

    def step(self, shape: int) -> StepResult:
        ids = torch.randint(0, self.vocab, (self.batch, self.seq_lens[shape]), device=self.device)
        if self.strategy == "warmed_up":
            with _forward_lock:
                loss = self.compiled(ids, self.masks[shape])
        else:
            loss = self.compiled(ids, self.masks[shape])
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return StepResult(tokens=ids.numel(), loss=float(loss.detach()))

    def eager_fallbacks(self) -> int:
        return 0  # it cannot tell; racegate's throughput gate still applies


class ShortStepWorkload:
    def __init__(self, preset: str) -> None:
        self.preset = preset
        self.name = f"short-step-{preset}"

    def roles(self) -> WorkloadRoles:
        return ROLES

    def strategies(self) -> Sequence[str]:
        return STRATEGIES

    def shapes(self) -> Sequence[int]:
        return list(range(len(SEQ_LENS[self.preset])))

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> ShortStepReplica:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose from: {', '.join(STRATEGIES)}")
        return ShortStepReplica(torch.device(device), strategy, seed, self.preset)

    def flops_per_step(self, shape: int) -> float | None:
        return None  # unknown: no MFU


def make_workload(preset: str = "tiny") -> ShortStepWorkload:
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; choose from: {', '.join(SIZES)}")
    return ShortStepWorkload(preset)
