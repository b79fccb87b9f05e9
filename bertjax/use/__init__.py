"""Using a BERT: each module works on one loaded model and its tokenizer (`bertjax.from_pretrained`).

    encode.py         text -> padded batches, a jitted inference forward
    fill_mask.py      top-k tokens for every [MASK]
    next_sentence.py  P(IsNext) of sentence pairs
    embed.py          sentence embeddings (mean / [CLS] pooling, as sentence-transformers), nearest lines
    attention.py      attention maps of one input (drawn by `bertjax.viz.attention`)
    tag.py            named entities per token, as transformers' token-classification pipeline
    answer.py         answer spans over a context's windows, as transformers' question-answering pipeline
    arguments.py      the API's argument checks (a list of texts, the head a call needs)
    packed.py         several inputs per row in token-budget batches (--max-tokens)
    truncation.py     the warning for inputs cut to the model's length

It may import `bertjax.data` (tokenizers) and the model core; the tasks, the jobs and the
command line use it.
"""
