"""Documents from Python objects: an iterable of texts, of documents or of records.

Each item is one document: a text (`str`, split into sentences as a JSON-lines record's text is),
a document already split (a list or tuple of sentence strings: kept in order, stripped, blank ones
dropped) or a record (a dict whose `text_field` string is the text). Items are read one at a time,
so a generator is never held whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from bertjax.data.formats.text import Document, record_document, split_sentences
from bertjax.errors import InputError

ITEM_HINT = ("give texts (str), documents (lists of sentence strings) or records (dicts with a "
             "text field)")


def item_document(item: object, text_field: str = "text", index: int = 0) -> Document:
    """The document of one item (see the module docstring); ValueError naming item `index` for
    anything else."""
    if isinstance(item, str):
        return split_sentences(item)
    if isinstance(item, dict):
        return record_document(item, text_field, f"item {index} of the iterable")
    if isinstance(item, list | tuple):
        if all(isinstance(s, str) for s in item):
            return [s.strip() for s in item if s.strip()]
        wrong = next(s for s in item if not isinstance(s, str))
        raise InputError(f"item {index} of the iterable is a document with a "
                         f"{type(wrong).__name__} among its sentences; {ITEM_HINT}")
    raise InputError(f"item {index} of the iterable is a {type(item).__name__}; {ITEM_HINT}")


def iterable_documents(items: Iterable[object], text_field: str = "text") -> Iterator[Document]:
    """The documents of `items` (texts, documents or records, see the module docstring), one item
    at a time; items that hold no sentence are skipped."""
    for index, item in enumerate(items):
        document = item_document(item, text_field, index)
        if document:
            yield document
