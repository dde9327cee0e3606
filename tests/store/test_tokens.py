"""The columnar tokenizer the MXNet trainer and scorer adapter share gives the ids Keras'
TextVectorization gives for the same vocabulary (so both frameworks read text alike)."""

from __future__ import annotations

import numpy as np

from headrace.store import tokens

TEXTS = ["Hello, World!", "  hello   there\tfriend ", "", "what's the WEATHER in Paris?",
         "Ünïcode café — déjà vu", "a b c d e f g h i j k", "it's 7:30 (a.m.)"]


def test_vocabulary_is_most_frequent_first_and_ids_pad_and_mark_unknown_tokens() -> None:
    vocab = tokens.learn_vocabulary(TEXTS, max_tokens=8)
    assert vocab[0] == "hello" and len(vocab) == 6  # then count 1, ties by token
    ids = tokens.encode_text(["hello zzz", "", None], vocab, max_length=3)  # type: ignore[list-item]
    assert ids.tolist() == [[2, tokens.OOV, 0], [0, 0, 0], [0, 0, 0]]
    cats = tokens.encode_categories(["b", "a", "z"], tokens.learn_categories(["a", "b", "b"]))
    assert cats.tolist() == [1, 2, 0]


def test_token_ids_match_keras_text_vectorization() -> None:
    import keras

    vocab = tokens.learn_vocabulary(TEXTS, max_tokens=100)
    layer = keras.layers.TextVectorization(vocabulary=vocab, output_sequence_length=6,
                                           standardize="lower_and_strip_punctuation",
                                           split="whitespace")
    expected = np.asarray(layer(np.array(TEXTS, dtype=object)))
    np.testing.assert_array_equal(tokens.encode_text(TEXTS, vocab, max_length=6), expected)
