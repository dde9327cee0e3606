"""Held-out sets for the families-against-baselines check (bench_model_quality ``--heldout``).

Written for it and never used to choose a default: the text family's body and the regressor's
were chosen on the development sets (``tickets`` from bench/quality_tickets.py at seed 1005,
``intents`` at seed 1002, scikit-learn's diabetes). These are other generators, at seed 3000:

- ``reviews``: product reviews, 6 classes = aspect (battery, screen, delivery) x sentiment,
  sentiment words with synonyms, negation that flips them ("not great", "never failed"),
  a clause praising or blaming *another* aspect as distractor, filler and 5 % flipped labels.
- ``helpdesk``: IT helpdesk tickets, 5 topics (vpn, printer, email, password, laptop) told by
  overlapping topic words, with log noise (hex ids, paths, times), random other-topic words
  and 3 % flipped labels.
- ``friedman``: scikit-learn's Friedman #1 (10 features, 5 of them noise) with noise 1.0 and
  columns on scales from 0.01 to 100: a smooth nonlinear regression.
- ``linear``: a linear target where ridge is the right model (400 rows, 20 correlated columns,
  8 informative, heavy noise, columns on scales from 0.01 to 100): the regressor must not lose
  to ridge where there is nothing nonlinear to find (added with the ridge start, never tuned on).

``--seeds N`` runs seeds 3000 .. 3000+N-1 of each generator.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SEED = 3000

ASPECTS = {
    "battery": ["battery", "battery life", "charge", "power"],
    "screen": ["screen", "display", "panel", "colours"],
    "delivery": ["delivery", "shipping", "courier", "parcel"],
}
GOOD = ["great", "excellent", "fantastic", "solid", "impressive", "reliable", "superb"]
BAD = ["terrible", "awful", "poor", "disappointing", "weak", "useless", "dreadful"]
GOOD_VERB = ["lasts", "works", "holds up", "delivers"]
BAD_VERB = ["failed", "broke", "died", "let me down"]
FILLER = ["i bought this for my son", "ordered it last month", "second phone from them",
          "used it every day", "the box was plain", "price was ok", "overall",
          "to be honest", "after two weeks", "as expected", "my friend has one too"]


def _review_clause(aspect: str, positive: bool, rng: np.random.Generator) -> str:
    a = str(rng.choice(ASPECTS[aspect]))
    shape = int(rng.integers(4))
    if shape == 0:  # plain: "the screen is great"
        return f"the {a} is {rng.choice(GOOD if positive else BAD)}"
    if shape == 1:  # negated opposite: "the screen is not terrible"
        return f"the {a} is not {rng.choice(BAD if positive else GOOD)}"
    if shape == 2:  # verbs: "the battery never failed" / "the battery never lasts"
        if rng.random() < 0.5:
            return f"the {a} {rng.choice(GOOD_VERB if positive else BAD_VERB)}"
        return f"the {a} never {rng.choice(BAD_VERB if positive else GOOD_VERB)}"
    return f"{rng.choice(GOOD if positive else BAD)} {a}"


def reviews(path: Path, rows: int = 1800, seed: int = SEED) -> Path:
    rng = np.random.default_rng(seed)
    aspects = sorted(ASPECTS)
    lines = []
    for _ in range(rows):
        aspect, positive = str(rng.choice(aspects)), bool(rng.random() < 0.5)
        clauses = [_review_clause(aspect, positive, rng)]
        if rng.random() < 0.7:  # another aspect, either way: it is not what the review is about
            other = str(rng.choice([x for x in aspects if x != aspect]))
            clauses.insert(int(rng.integers(2)), "but " * int(rng.random() < 0.3)
                           + _review_clause(other, bool(rng.random() < 0.5), rng) + " though")
        for _ in range(int(rng.integers(3))):
            clauses.insert(int(rng.integers(len(clauses) + 1)), str(rng.choice(FILLER)))
        label = f"{aspect}_{'pos' if positive else 'neg'}"
        if rng.random() < 0.05:
            label = f"{rng.choice(aspects)}_{rng.choice(['pos', 'neg'])}"
        lines.append(json.dumps({"review": ", ".join(clauses), "label": label}))
    path.write_text("\n".join(lines) + "\n")
    return path


TOPICS = {
    "vpn": ["vpn", "tunnel", "remote access", "anyconnect", "connection", "network", "token"],
    "printer": ["printer", "print queue", "toner", "paper jam", "scanner", "driver", "network"],
    "email": ["outlook", "mailbox", "email", "inbox", "attachment", "calendar", "sync"],
    "password": ["password", "locked out", "reset", "login", "mfa", "token", "account"],
    "laptop": ["laptop", "screen", "keyboard", "battery", "docking station", "driver", "slow"],
}
VERBS = ["is not working", "keeps failing", "stopped", "gives an error", "is broken",
         "does not respond", "needs fixing", "is very slow"]
OPENERS = ["hi team", "hello", "urgent", "please advise", "good afternoon", ""]


def _noise(rng: np.random.Generator) -> str:
    kind = int(rng.integers(3))
    if kind == 0:
        return f"ref 0x{int(rng.integers(1 << 24)):06x}"
    if kind == 1:
        return f"C:/Users/u{int(rng.integers(1000))}/AppData"
    return f"at {int(rng.integers(24)):02d}:{int(rng.integers(60)):02d}"


def helpdesk(path: Path, rows: int = 1500, seed: int = SEED) -> Path:
    rng = np.random.default_rng(seed)
    topics = sorted(TOPICS)
    every = sorted({w for ws in TOPICS.values() for w in ws})
    lines = []
    for _ in range(rows):
        topic = str(rng.choice(topics))
        words = [str(rng.choice(OPENERS))]
        for _ in range(int(rng.integers(1, 3))):
            words.append(f"my {rng.choice(TOPICS[topic])} {rng.choice(VERBS)}")
        for _ in range(int(rng.integers(0, 3))):
            words.append(_noise(rng))
        if rng.random() < 0.5:  # a word of another topic, mentioned in passing
            words.insert(int(rng.integers(len(words) + 1)), f"also {rng.choice(every)}")
        label = topic if rng.random() >= 0.03 else str(rng.choice(topics))
        lines.append(json.dumps({"ticket": " ".join(w for w in words if w), "label": label}))
    path.write_text("\n".join(lines) + "\n")
    return path


def friedman(path: Path, rows: int = 1500, seed: int = SEED) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=rows, n_features=10, noise=1.0, random_state=seed)
    rng = np.random.default_rng(seed)
    x = x * 10 ** rng.uniform(-2, 2, x.shape[1])
    cols = {f"x{i}": pa.array(x[:, i]) for i in range(x.shape[1])}
    cols["label"] = pa.array(y)
    pcsv.write_csv(pa.table(cols), path)
    return path


def linear(path: Path, rows: int = 400, seed: int = SEED) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    from sklearn.datasets import make_regression

    x, y = make_regression(n_samples=rows, n_features=20, n_informative=8, effective_rank=10,
                           noise=6.0, random_state=seed)
    rng = np.random.default_rng(seed)
    x = x * 10 ** rng.uniform(-2, 2, x.shape[1])
    cols = {f"x{i}": pa.array(x[:, i]) for i in range(x.shape[1])}
    cols["label"] = pa.array(y)
    pcsv.write_csv(pa.table(cols), path)
    return path
