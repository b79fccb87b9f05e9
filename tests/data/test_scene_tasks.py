"""The bundled scene tasks: held out by whole plays, deterministic, every tag, answer and label
well formed, sizes as documented, and the speakers kept by the play reader."""

from __future__ import annotations

import pytest

from bertjax.data.corpus import play_scenes, shakespeare_scenes, spoken_scenes
from bertjax.data.labelled import GENRE_HELD_OUT
from bertjax.data.scene_tasks import (
    PER_PLAY,
    character_names,
    character_tagging,
    next_line_choices,
    speaker_questions,
    split_plays,
)
from bertjax.data.tagging import label_list

SPLITS = ("train", "validation", "test")
PLAY = """# Act 1

## Scene 1

**SIR TOBY BELCH**
What a plague means my niece, Maria?

_Enter MARIA._

**MARIA**
By my troth, Sir Toby, you must come in earlier.

**First Officer**
Peace.
"""


def test_the_reader_keeps_each_speech_speaker():
    assert list(spoken_scenes(PLAY)) == [[
        ("SIR TOBY BELCH", "What a plague means my niece, Maria?"),
        ("MARIA", "By my troth, Sir Toby, you must come in earlier."),
        ("First Officer", "Peace.")]]
    assert list(play_scenes(PLAY)) == [[s for _, s in next(spoken_scenes(PLAY))]]


@pytest.mark.slow
def test_splits_are_whole_plays():
    plays = {split: set(split_plays(split)) for split in SPLITS}
    assert plays["validation"] == set(GENRE_HELD_OUT["validation"])
    assert plays["test"] == set(GENRE_HELD_OUT["test"]) and len(plays["train"]) == 26
    assert not plays["train"] & (plays["validation"] | plays["test"])
    for build in (character_tagging, speaker_questions, next_line_choices):
        for split in SPLITS:
            assert {e.where.split(" ")[0] for e in build(split)} == plays[split], build
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        split_plays("dev")


def test_characters_are_named_as_the_text_names_them():
    names = character_names("twelfth-night")
    assert names[("Sir", "Toby")] == names[("Toby",)] == "SIR TOBY BELCH"
    assert names[("Orsino",)] == names[("Duke", "Orsino")] == "DUKE ORSINO"
    assert ("Sir",) not in names and ("Clown",) not in names  # titles and roles are no names


def test_tagged_sentences_half_mention_a_character():
    for split in SPLITS:
        sentences = character_tagging(split)
        with_names = [s for s in sentences if "B-PER" in s.tags]
        assert len(with_names) == len(sentences) / 2 <= PER_PLAY * len(split_plays(split))
    assert label_list(character_tagging("train")) == ("O", "B-PER", "I-PER")
    toby = next(s for s in character_tagging("test") if "Toby" in s.tokens)
    at = toby.tokens.index("Toby")
    assert toby.tags[at] in ("B-PER", "I-PER")


def test_questions_answer_with_the_speaker_of_the_quoted_line():
    for split in SPLITS:
        questions = speaker_questions(split)
        assert len(questions) == PER_PLAY * len(split_plays(split))
        assert len({q.id for q in questions}) == len(questions)
        for q in questions:
            (text, start), = q.answers
            assert text.strip() and q.context[start:start + len(text)] == text  # a name
            quoted = q.question.removeprefix('Who says "').removesuffix('"?')
            line = q.context[start:].split("\n")[0]
            assert line.startswith(f"{text}: {quoted}")


def test_next_line_choices_are_four_speeches_with_the_true_one_labelled():
    examples = next_line_choices("validation")
    assert len(examples) == PER_PLAY * 6
    assert all(len(e.choices) == 4 and 0 <= e.label < 4 for e in examples)
    labels = [e.label for e in examples]
    assert min(labels.count(k) for k in range(4)) > len(examples) / 8  # shuffled, not fixed
    for e in examples:  # the context ends a speech, the right choice begins the next one
        play, _, scene, _, speech = e.where.rsplit(" ", 4)
        speeches = [text.split() for _, text in shakespeare_scenes(play)[int(scene) - 1]]
        assert e.context.split() == speeches[int(speech) - 1][-24:]
        assert e.choices[e.label].split() == speeches[int(speech)][:16]


def test_the_tasks_are_the_same_in_every_call():
    for build in (character_tagging, speaker_questions, next_line_choices):
        build.cache_clear()
        first = build("test")
        build.cache_clear()
        assert build("test") == first
