"""Analytic FLOPs of one drafter train step (the MFU numerator; counted as docs/workload.md says).

Per micro-batch of b sequences, context S, T = N*block query tokens, K = S + T keys, hidden H,
intermediate I, q width Hq*D, kv width Hkv*D, vocab V, L layers, X = len(target_layer_ids)*H_t:
  GEMMs      3 x 2*[ b*T*H*Hq*D*2 (q, o) + b*K*H*Hkv*D*2 (k, v) + b*T*H*I*3 (MLP) ] x L
             + 2 x 2*b*S*X*H   (fc: its input, the target's states, needs no gradient)
  attention  3 x 4*Hq*D*P      (QK^T and PV over P = visible (query, key) pairs of the mask)
  lm_head    3 x 2*b*T*H*V     (forward + checkpoint recompute + input grad; weight frozen)
and x micro_batches. 3x = forward + backward (input and weight grads). Norms, RoPE, softmax
and the optimizer are not counted; neither is the target forward (docs/workload.md excludes it).
At the reference shape (b=1, S=3072, 512x16, 13.9% density) this gives 83.0 TFLOP: GEMMs
59%, lm_head 37%, attention 4% (tests/test_model_config.py checks it against docs/workload.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from racegate.model.config import DrafterConfig
from racegate.model.data import Bucket


@dataclass(frozen=True)
class StepFlops:
    gemm: float
    attention: float
    lm_head: float

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.lm_head


def micro_batch_flops(
    cfg: DrafterConfig, batch: int, context_len: int, num_anchors: int, visible_pairs: float
) -> StepFlops:
    """FLOPs of one micro-batch; `visible_pairs` summed over its sequences, per head."""
    h = cfg.hidden_size
    q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    t = num_anchors * cfg.block_size
    keys = context_len + t
    per_layer = (
        2 * batch * t * h * q_width * 2
        + 2 * batch * keys * h * kv_width * 2
        + 2 * batch * t * h * cfg.intermediate_size * 3
    )
    fc = 2 * batch * context_len * len(cfg.target_layer_ids) * cfg.target_hidden_size * h
    gemm = 3 * per_layer * cfg.num_layers + 2 * fc
    attention = 3 * 4 * q_width * visible_pairs * cfg.num_layers
    lm_head = 3 * 2 * batch * t * h * cfg.vocab_size
    return StepFlops(float(gemm), float(attention), float(lm_head))


def step_flops(cfg: DrafterConfig, bucket: Bucket, visible_pairs_per_micro: float) -> StepFlops:
    """FLOPs of one optimizer step on `bucket` (all its micro-batches)."""
    one = micro_batch_flops(
        cfg, bucket.batch_size, bucket.seq_len, bucket.num_anchors, visible_pairs_per_micro
    )
    n = bucket.micro_batches
    return StepFlops(one.gemm * n, one.attention * n, one.lm_head * n)
