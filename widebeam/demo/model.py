"""The demo model: a tiny Qwen3 with SID tokens, trained through the serving model's own modules.

Training reuses :class:`CausalLM` unchanged (so the saved state dict is exactly what
``CausalLM.from_pretrained`` and transformers load) and only swaps the attention context: the
serving contexts attend over a KV cache, :class:`PaddedCausalAttention` over a padded batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from widebeam.demo.config import ModelConfig
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.model.weights import SINGLE_FILE
from widebeam.services.decoder.testing.tiny_model import write_tiny_model


class PaddedCausalAttention:
    """A ``[B, T]`` batch flattened to ``B·T`` tokens, right-padded.

    Causality alone is the padding mask: with right padding, a real token only ever attends to
    earlier positions of its own row, which are all real; pad queries see garbage but carry no
    loss. That keeps SDPA on its fused ``is_causal`` path instead of a dense boolean mask.
    """

    def __init__(self, batch: int, length: int) -> None:
        self.batch, self.length = batch, length

    def attend(
        self,
        layer_idx: int,
        q: torch.Tensor,  # [B·T, n_heads, head_dim]
        k: torch.Tensor,  # [B·T, n_kv_heads, head_dim]
        v: torch.Tensor,  # [B·T, n_kv_heads, head_dim]
    ) -> torch.Tensor:  # [B·T, n_heads, head_dim]
        b, t = self.batch, self.length

        def split(x: torch.Tensor) -> torch.Tensor:  # [B·T, H, hd] -> [B, H, T, hd]
            return x.view(b, t, x.shape[1], x.shape[2]).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            split(q), split(k), split(v), is_causal=True, enable_gqa=True
        )  # [B, n_heads, T, head_dim]
        return out.transpose(1, 2).reshape(b * t, q.shape[1], q.shape[2])


def sequence_logits(
    model: CausalLM,
    tokens: torch.Tensor,  # [B, T] int64, right-padded
    targets: torch.Tensor,  # [B, T] bool: positions whose NEXT token carries loss
) -> torch.Tensor:  # [P, vocab] fp32 logits at the P target positions
    b, t = tokens.shape
    positions = torch.arange(t).repeat(b)  # [B·T] int64
    hidden = model(tokens.reshape(-1), positions, PaddedCausalAttention(b, t))  # [B·T, hidden]
    # The LM head only where there is a loss: most positions are begin tokens or padding.
    return model.compute_logits(hidden[targets.reshape(-1)])


def init_model_dir(
    out: Path, cfg: ModelConfig, codebook_sizes: tuple[int, ...], seed: int
) -> CausalLM:
    """Write config, tokenizer and HF-style random weights (std 0.02); return them trainable."""
    write_tiny_model(
        out,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        sid_levels=tuple(codebook_sizes),
        base_vocab=cfg.base_vocab,
        seed=seed,
        init_std=0.02,
        max_position_embeddings=4096,
    )
    model = CausalLM.from_pretrained(out)
    with torch.no_grad():  # tiny's test init perturbs norm weights; a trained model starts at 1
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
    return model.requires_grad_(True).train()


def save_model(model: CausalLM, out: Path, metadata: dict[str, object] | None = None) -> None:
    """Overwrite the weights of ``out`` (written by :func:`init_model_dir`) with ``model``'s."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / SINGLE_FILE), metadata={"format": "pt"})
    # safetensors writes 0600; a container user mounting the model directory must read it.
    (out / SINGLE_FILE).chmod(0o644)
    if metadata is not None:
        (out / "widebeam_demo.json").write_text(json.dumps(metadata, indent=2) + "\n")
