"""The serving LM head: padded to aligned rows, same logits as the checkpoint's head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.services.decoder.model.conftest import TinyFactory
from widebeam.services.decoder.model.transformer import HEAD_ROW_ALIGN, CausalLM
from widebeam.services.decoder.model.weights import load_state_dict


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("vocab", [300, 320])  # unaligned, aligned
def test_head_logits_equal_the_checkpoint_head(
    tiny_model_dir: TinyFactory, tied: bool, vocab: int
) -> None:
    path = tiny_model_dir(vocab_size=vocab, tie_word_embeddings=tied, seed=3)
    model = CausalLM.from_pretrained(path)
    state = load_state_dict(path)
    head = state["model.embed_tokens.weight" if tied else "lm_head.weight"]  # [vocab, hidden]
    hidden = torch.randn(7, head.shape[1])
    logits = model.head_logits(hidden)
    assert logits.shape == (7, vocab)
    torch.testing.assert_close(logits, F.linear(hidden, head), rtol=0, atol=1e-5)
    torch.testing.assert_close(model.compute_logits(hidden), logits)
    assert torch.equal(model.lm_head_weight, head)
    if vocab % HEAD_ROW_ALIGN:
        padded = model.padded_head  # [rows, hidden]
        assert padded.shape[0] % HEAD_ROW_ALIGN == 0
        assert not padded[vocab:].any()
        # The head's parameter is a view of the padded copy: one copy of the weights.
        assert model.lm_head_weight.data_ptr() == padded.data_ptr()
        assert logits.stride(0) == padded.shape[0]
    else:
        assert model.padded_head is None
    # The state dict still holds the checkpoint's shapes (nothing padded leaks into saving).
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {
        k: tuple(v.shape) for k, v in state.items()
    }
