"""Three fine-tuning tasks built from the bundled plays' scenes, one per kind, split by whole
plays as the genre task is (`GENRE_HELD_OUT`: six validation plays, six test plays, the other 26
for training), so a model is scored on characters, scenes and lines it never saw:

    character_tagging   token classification: mentions of the play's own characters (the
                        speakers its headings write in capitals) tagged B-PER / I-PER in
                        sentences of its speeches, beside as many sentences without any
    speaker_questions   question answering: 'Who says "<the start of a line>"?' over an excerpt
                        of a scene written "Speaker: speech"; the answer is that line's speaker
    next_line_choices   multiple choice: which of four speeches of the same scene follows one

Everything is drawn with fixed seeds: the same examples in every process. No framework.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from typing import Any, TypeVar

from bertjax.data.choices import ChoiceExample
from bertjax.data.corpus import shakespeare_genres, shakespeare_scenes, split_sentences
from bertjax.data.labelled import GENRE_HELD_OUT
from bertjax.data.squad import QAExample
from bertjax.data.tagging import TaggedSentence
from bertjax.errors import InputError

CHARACTERS_TASK = "shakespeare-characters"
SPEAKERS_TASK = "shakespeare-speakers"
NEXT_LINE_TASK = "shakespeare-next-line"
PER_PLAY = 40  # examples drawn from each play (tagging: this many with mentions, as many without)
_TITLES = frozenset({"KING", "QUEEN", "LORD", "LADY", "PRINCE", "PRINCESS", "DUKE", "DUCHESS",
                     "SIR", "EARL", "COUNT", "COUNTESS", "CARDINAL", "BISHOP", "FRIAR", "MISTRESS",
                     "MASTER", "MARQUESS", "MARK", "SAINT"})
_WORDS = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
_Item = TypeVar("_Item")


def split_plays(split: str) -> list[str]:
    """The plays of a split: "validation" and "test" are the genre task's held-out plays,
    "train" the others."""
    if split in GENRE_HELD_OUT:
        return list(GENRE_HELD_OUT[split])
    if split != "train":
        raise InputError(f"unknown split {split!r}; choose train, validation or test")
    held = {p for plays in GENRE_HELD_OUT.values() for p in plays}
    return [p for p in shakespeare_genres() if p not in held]


def _per_play(split: str, build: Callable[[str, random.Random], list[_Item]]) -> list[_Item]:
    return [x for play in split_plays(split) for x in build(play, random.Random(f"{play}-0"))]


# --- names ---------------------------------------------------------------------------------------


def character_names(play: str) -> dict[tuple[str, ...], str]:
    """How the play's characters are mentioned (word tuples, e.g. ("Sir", "Toby")) -> the speaker
    heading. A character is a heading in capitals ("HAMLET", "LORD POLONIUS"; not "First Clown"
    or "ROSENCRANTZ & GUILDENSTERN"); it is mentioned by its whole heading, without its title,
    by its first or last name, and by its title and first name."""
    forms: dict[tuple[str, ...], str] = {}
    for speaker in sorted({s for scene in shakespeare_scenes(play) for s, _ in scene}):
        words = speaker.split()
        if not words or speaker != speaker.upper() or not all(w.isalpha() for w in words):
            continue
        titled = tuple(w.capitalize() for w in words)
        names = tuple(w.capitalize() for w in words if w not in _TITLES)
        if not names:
            continue
        title = titled[:len(titled) - len(names)]
        for form in (titled, names, names[:1], names[-1:], title + names[:1]):
            forms.setdefault(form, speaker)
    return forms


def _tag(tokens: list[str], forms: dict[tuple[str, ...], str]) -> list[str]:
    """BIO tags of the longest name forms found in `tokens`, left to right."""
    tags, i, longest = ["O"] * len(tokens), 0, max(map(len, forms), default=0)
    while i < len(tokens):
        for n in range(min(longest, len(tokens) - i), 0, -1):
            if tuple(tokens[i:i + n]) in forms:
                tags[i:i + n] = ["B-PER"] + ["I-PER"] * (n - 1)
                i += n
                break
        else:
            i += 1
    return tags


# --- the tasks -----------------------------------------------------------------------------------


@functools.cache
def character_tagging(split: str) -> list[TaggedSentence]:
    """Sentences of 4 to 40 words from each play of `split`: up to `PER_PLAY` that mention one
    of its characters, and as many that mention none, tagged B-PER / I-PER."""
    return _per_play(split, _tagged_sentences)


def _tagged_sentences(play: str, rng: random.Random) -> list[TaggedSentence]:
    forms = character_names(play)
    mentions: list[Any] = []
    others: list[Any] = []
    for s, scene in enumerate(shakespeare_scenes(play), 1):
        for n, (_, speech) in enumerate(scene, 1):
            for sentence in split_sentences(speech):
                tokens = _WORDS.findall(sentence)
                if 4 <= len(tokens) <= 40:
                    tags = _tag(tokens, forms)
                    row = TaggedSentence(tuple(tokens), tuple(tags), f"{play} scene {s} speech {n}")
                    (mentions if "B-PER" in tags else others).append(row)
    chosen = rng.sample(mentions, min(PER_PLAY, len(mentions)))
    return chosen + rng.sample(others, min(len(chosen), len(others)))


@functools.cache
def speaker_questions(split: str, lines: int = 4, words: int = 24) -> list[QAExample]:
    """Up to `PER_PLAY` questions per play: an excerpt of `lines` consecutive speeches of a scene,
    each "Speaker: its first `words` words", and 'Who says "<the first words of one>"?'; the
    answer is the speaker's name just before that speech."""
    return _per_play(split, lambda play, rng: _questions(play, rng, lines, words))


def _questions(play: str, rng: random.Random, lines: int, words: int) -> list[QAExample]:
    starts = [(s, i) for s, scene in enumerate(shakespeare_scenes(play))
              for i in range(len(scene) - lines + 1)]
    out = []
    for s, i in rng.sample(starts, min(PER_PLAY, len(starts))):
        excerpt = shakespeare_scenes(play)[s][i:i + lines]
        context, places = "", []
        for speaker, speech in excerpt:
            name = speaker.title()
            places.append((name, len(context)))
            context += f"{name}: {' '.join(speech.split()[:words])}\n"
        k = rng.randrange(lines)
        quoted = " ".join(excerpt[k][1].split()[:8])
        out.append(QAExample(f"{play}-{s}-{i}", f'Who says "{quoted}"?', context.strip(),
                             (places[k],), f"{play} scene {s + 1} speech {i + k + 1}"))
    return out


@functools.cache
def next_line_choices(split: str, choices: int = 4, words: int = 16,
                      context_words: int = 24) -> list[ChoiceExample]:
    """Up to `PER_PLAY` examples per play: the end of a speech (its last `context_words` words:
    what a reply answers) and `choices` speeches of the same scene (their first `words` words),
    one of them the speech that follows it, in a seeded order. At these lengths a pair fits in
    64 pieces of all-MiniLM-L6-v2's vocabulary 98% of the time."""
    return _per_play(split, lambda play, rng: _next_lines(play, rng, choices, words,
                                                          context_words))


def _next_lines(play: str, rng: random.Random, choices: int, words: int,
                context_words: int) -> list[ChoiceExample]:
    cut = lambda text: " ".join(text.split()[:words])  # noqa: E731
    end = lambda text: " ".join(text.split()[-context_words:])  # noqa: E731
    candidates = [(s, i) for s, scene in enumerate(shakespeare_scenes(play))
                  if len(scene) >= choices + 2 for i in range(len(scene) - 1)]
    out = []
    for s, i in rng.sample(candidates, min(PER_PLAY, len(candidates))):
        scene = shakespeare_scenes(play)[s]
        others = [j for j in range(len(scene)) if j not in (i, i + 1)]
        options = [i + 1, *rng.sample(others, choices - 1)]
        rng.shuffle(options)
        out.append(ChoiceExample(end(scene[i][1]), tuple(cut(scene[j][1]) for j in options),
                                 options.index(i + 1), f"{play} scene {s + 1} speech {i + 1}"))
    return out
