"""The BERT family as data: what RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA and ModernBERT
checkpoints do differently from BERT, one `Family` row each, by config.json's `model_type`. The
encoders, the heads, the tokenizer and the name tables of `bertjax.io.names` read these rows; no
model class is copied per family. ModernBERT's layers differ in structure (pre-norm, rotary
positions, gated feed-forward, local attention): its row names its own encoder module
(`bertjax.modernbert`), which the heads' classes hold as they hold BERT's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from bertjax.config import modernbert
from bertjax.config.heads import pretraining_class


@dataclasses.dataclass(frozen=True)
class Family:
    """What a checkpoint of one BERT family does differently from BERT: the whole difference is
    data, read by the one encoder (`bertjax.model`, `bert_torch.model`), the heads, the tokenizer
    and the name tables of `bertjax.io.names`. config.json's `model_type` names the family."""

    model_type: str
    class_prefix: str  # transformers' class names: f"{class_prefix}ForMaskedLM", ...
    # role (pad, unk, cls, sep, mask) -> the token's spelling in this family's vocabularies
    special_tokens: tuple[tuple[str, str], ...] = ()
    # positions count from pad_token_id + 1 and padding sits at pad_token_id (RoBERTa's
    # `create_position_ids_from_input_ids`), so pad_token_id + 1 rows of the table are not
    # positions of a sequence; BERT's positions are 0..S-1
    offset_positions: bool = False
    next_sentence: bool = False  # pre-trained with a next-sentence head (BertForPreTraining)
    token_types: bool = True  # a token-type embedding table (DistilBERT has none)
    # whether the bare encoder (BertModel) has the pooler; the heads that read one have it anyway
    base_pooler: bool = True
    # the pooler's activation: BERT's tanh; DistilBERT's `pre_classifier` + ReLU and ELECTRA's
    # `sequence_summary` + GELU are the pooler of its classification and multiple-choice heads
    pooler_activation: str = "tanh"
    # sequence classification on the first token through `ClassificationHead` (dense, this
    # activation, out_proj; no pooler): RoBERTa's tanh, ELECTRA's gelu; "" for the pooler and one
    # dense layer (BERT, DistilBERT)
    classifier_head: str = ""
    pair_separators: int = 1  # separators between a pair's segments: [SEP] (1) or </s></s> (2)
    second_segment_type: int = 1  # the token type of a pair's second segment
    # transformers' name where it is not the prefix's (ELECTRA's discriminator is its
    # ElectraForPreTraining): (bertjax's name, transformers')
    class_names: tuple[tuple[str, str], ...] = ()
    # config.json's names for BertConfig's fields where they differ (DistilBERT's `dim`, ...):
    # (ours, theirs); BERT's fields its config.json does not have; BertConfig's fields this
    # family alone has (ELECTRA's embedding_size, ModernBERT's switches), which every other
    # family refuses unless at their defaults (`foreign_fields`)
    config_names: tuple[tuple[str, str], ...] = ()
    absent_fields: tuple[str, ...] = ()
    own_fields: tuple[str, ...] = ()
    # transformers' values of fields a config.json may leave out, where they are not BertConfig's
    # (config.json's names)
    config_defaults: tuple[tuple[str, object], ...] = ()
    # config.json -> the same with settings read into BertConfig's fields, refusing those
    # bertjax does not compute (ModernBERT's layer types and RoPE bases: `config.modernbert`)
    config_reader: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # config.json's special-token ids an export writes from its tokenizer: (key, role)
    config_token_ids: tuple[tuple[str, str], ...] = ()
    # the family's preset of a size: (name, `PRESETS[name]`) -> BertConfig's fields (ModernBERT's
    # released shapes and norm epsilon: `config.modernbert.preset`); None: the sizes as they are
    preset: Callable[[str, Mapping[str, Any]], dict[str, Any]] | None = None
    # the encoder and the heads' modules: BERT's (`bertjax.model`) or ModernBERT's
    # (`bertjax.modernbert`); the same `BertFor*` classes hold either
    encoder: str = "bert"
    position_table: bool = True  # absolute positions in a table; ModernBERT's are rotary
    # the masked-LM head's activation: transformers' RoBERTa and ELECTRA heads use GELU whatever
    # hidden_act says; "" for hidden_act (BERT, DistilBERT)
    mlm_activation: str = ""

    @property
    def pretraining_class(self) -> str:
        """The class the family is pre-trained as: BERT's BertForPreTraining (masked LM and next
        sentence), the others' masked LM (BertForMaskedLM)."""
        return pretraining_class(self.next_sentence)

    @property
    def specials(self) -> dict[str, str]:
        """role -> spelling of the special tokens."""
        return dict(self.special_tokens)

    def class_name(self, bert_name: str) -> str:
        """transformers' name of the class bertjax calls `bert_name` (BertForMaskedLM ->
        RobertaForMaskedLM)."""
        return dict(self.class_names).get(bert_name,
                                          self.class_prefix + bert_name.removeprefix("Bert"))

    def bertjax_name(self, name: str) -> str:
        """bertjax's name of transformers' class `name` (the inverse of `class_name`; a v4
        `Flax` name too); `name` itself if it is none of this family's."""
        name = name.removeprefix("Flax")
        for ours, theirs in self.class_names:
            if name == theirs:
                return ours
        if name.startswith(self.class_prefix):
            return "Bert" + name[len(self.class_prefix):]
        return name


BERT_SPECIAL_TOKENS = (("pad", "[PAD]"), ("unk", "[UNK]"), ("cls", "[CLS]"), ("sep", "[SEP]"),
                       ("mask", "[MASK]"))
_ROBERTA: dict[str, Any] = dict(special_tokens=(("pad", "<pad>"), ("unk", "<unk>"), ("cls", "<s>"),
                                ("sep", "</s>"), ("mask", "<mask>")),
                offset_positions=True, classifier_head="tanh", pair_separators=2,
                second_segment_type=0, mlm_activation="gelu")
# The families bertjax has, by config.json's model_type. XLM-RoBERTa is RoBERTa's architecture
# with a SentencePiece vocabulary (the tokenizer's business, read from tokenizer.json).
FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("bert", "Bert", BERT_SPECIAL_TOKENS, next_sentence=True),
    Family("roberta", "Roberta", **_ROBERTA),
    Family("xlm-roberta", "XLMRoberta", **_ROBERTA),
    Family("distilbert", "DistilBert", BERT_SPECIAL_TOKENS, token_types=False, base_pooler=False,
           pooler_activation="relu", second_segment_type=0,
           config_names=(("hidden_size", "dim"), ("num_hidden_layers", "n_layers"),
                         ("num_attention_heads", "n_heads"), ("intermediate_size", "hidden_dim"),
                         ("hidden_act", "activation"), ("hidden_dropout_prob", "dropout"),
                         ("attention_probs_dropout_prob", "attention_dropout"),
                         ("classifier_dropout", "seq_classif_dropout")),
           absent_fields=("type_vocab_size", "layer_norm_eps")),
    Family("electra", "Electra", BERT_SPECIAL_TOKENS, base_pooler=False, pooler_activation="gelu",
           classifier_head="gelu", own_fields=("embedding_size",),
           config_defaults=(("embedding_size", 128),), mlm_activation="gelu",
           class_names=(("BertForReplacedTokenDetection", "ElectraForPreTraining"),)),
    # no token types, no next-sentence head, no pooler: its classifiers pool [CLS] or the mean
    # of the tokens (`classifier_pooling`) through a head of their own (`bertjax.modernbert`)
    Family("modernbert", "ModernBert", BERT_SPECIAL_TOKENS, token_types=False, base_pooler=False,
           second_segment_type=0, config_names=modernbert.NAMES,
           absent_fields=("type_vocab_size",), own_fields=modernbert.FIELDS,
           config_defaults=modernbert.DEFAULTS, config_reader=modernbert.read_config,
           config_token_ids=modernbert.TOKEN_IDS, preset=modernbert.preset, encoder="modernbert",
           position_table=False,
           class_names=(("BertTokenizer", "PreTrainedTokenizerFast"),)),
)}


def foreign_fields(family: Family) -> tuple[str, ...]:
    """BertConfig's fields that other families alone have: `family`'s config.json has none of
    them, and its configs keep them at their defaults."""
    return tuple(dict.fromkeys(name for other in FAMILIES.values() for name in other.own_fields
                               if name not in family.own_fields))


