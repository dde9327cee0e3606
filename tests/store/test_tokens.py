"""The columnar tokenizer the MXNet trainer and scorer adapter share gives the ids Keras'
TextVectorization gives for the same vocabulary (so both frameworks read text alike)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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


# Every kind of text a user may send: ASCII and Unicode spaces (NBSP, em space, ideographic
# space, line and paragraph separators, NEL), the ASCII whitespace Keras splits on (\t \n \v \f
# \r), full-width forms, combining marks, upper case outside ASCII, emoji (with ZWJ and skin
# tone), right-to-left scripts, unpaired-looking punctuation, empty and whitespace-only strings.
# "FULL-width text!" in full-width forms (U+FF01..U+FF5E and the ideographic space).
FULL_WIDTH = "".join(chr(0xFEE0 + ord(c)) if c != " " else "\u3000" for c in "FULL-width text!")
UNICODE = [
    "check\u00a0my\u00a0balance", "check\u2003my\u2003balance", "check\u3000my\u3000balance",
    "check\u2028my\u2029balance\u0085now", "check\u2009my\u202fbalance\u205fnow",
    "tab\there\nnew\x0bvt\x0cff\rcr", "\x1cfile\x1dgroup\x1erecord\x1funit",
    FULL_WIDTH,
    "Cafe\u0301 cafe\u0301 CAFÉ café", "ÀÉÎÕÜ straße ΣΊΣΥΦΟΣ",
    "I ❤️ 🍕 and 👩‍👩‍👧 👍🏽 ok", "שלום עולם, מה שלומך?", "مرحبا بالعالم! كيف الحال؟",
    "mixed עברית and English.", "", " ", "\t\n ", "\u00a0", "\u3000\u3000",
    "it's a dog's-life; 100% [sure] {yes} <no> ~ok~ `tick`",
    "«guillemets» \u201cquotes\u201d \u2018single\u2019",
    "zero\u200bwidth\u200cjoin\u200dmark\ufeffbom", "a" * 40 + " " + "b" * 3,
    "HELLO hello HeLLo", "check my balance", "MY BALANCE, please!",
]


def test_token_ids_match_keras_byte_for_byte_on_a_unicode_corpus() -> None:
    import keras

    vocab = tokens.learn_vocabulary(UNICODE, max_tokens=200)
    layer = keras.layers.TextVectorization(vocabulary=vocab, output_sequence_length=12,
                                           standardize="lower_and_strip_punctuation",
                                           split="whitespace")
    expected = np.asarray(layer(np.array(UNICODE, dtype=object)))
    got = tokens.encode_text(UNICODE, vocab, max_length=12)
    for text, want, ids in zip(UNICODE, expected, got, strict=True):
        assert ids.tolist() == want.tolist(), repr(text)
    # The tokens themselves, not only their ids: Keras' own vocabulary of the corpus.
    adapted = keras.layers.TextVectorization(standardize="lower_and_strip_punctuation",
                                             split="whitespace")
    adapted.adapt(np.array(UNICODE, dtype=object))
    assert set(adapted.get_vocabulary()[2:]) == set(vocab)
    assert tokens.token_counts(UNICODE).tolist() == [
        int(np.count_nonzero(r)) for r in np.asarray(
            keras.layers.TextVectorization(vocabulary=vocab, output_sequence_length=64)(
                np.array(UNICODE, dtype=object)))]


def test_over_length_finds_exactly_the_rows_token_counts_finds() -> None:
    """The scorer's over-length check tokenizes only rows long enough to be over (n tokens
    take at least 2n - 1 bytes): it must refuse exactly the rows the full count refuses."""
    rng = np.random.default_rng(0)
    words = [w for t in UNICODE for w in t.split()] + ["!!", "a", "b,", "é", "🍕", "x-y"]
    seps = [" ", "  ", "\t", "\u00a0", "\u3000", " , ", "\n"]
    built = ["".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.integers(0, 40)))
             for _ in range(300)]
    # At the bound: m one-byte tokens in 2m - 1 bytes (not over m), then m + 1 of them.
    edge = [t for m in (1, 2, 3, 8) for t in (
        " ".join("a" * m), " ".join("a" * (m + 1)), " ".join("a" * m) + " ,,,")]
    corpus = [*UNICODE, *built, *edge, None]
    full = tokens.token_counts(corpus)
    for max_length in (1, 2, 3, 5, 8, 16, 64):
        rows, counts = tokens.over_length(corpus, max_length)
        want = np.flatnonzero(full > max_length)
        assert rows.tolist() == want.tolist(), max_length
        assert counts.tolist() == full[want].tolist()
    assert tokens.over_length(pa.array(["a b c"]), 2)[0].tolist() == [0]
    assert tokens.over_length(pa.array(["a b"]), 2)[0].tolist() == []
