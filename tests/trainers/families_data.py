"""Real small data for the family tests: scikit-learn's bundled sets and a templated intent
corpus, written as the files a user would hand to ``datasets put``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image


def digits_folder(out: Path, *, rows: int | None = None) -> Path:
    """The 8x8 digits as PNGs, one sub-folder per class (pixel 0..16 scaled to 0..255)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.clip(d.images * (255 / 16), 0, 255).astype(np.uint8)
    for i, (img, y) in enumerate(zip(images[:rows], d.target[:rows], strict=False)):
        folder = out / str(y)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img, mode="L").save(folder / f"{i:04d}.png")
    return out


def digits_tensor_parquet(path: Path) -> Path:
    """The digits as an Arrow fixed-shape tensor column (8, 8) and an integer label."""
    from sklearn.datasets import load_digits

    d = load_digits()
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (8, 8))
    pixels = pa.ExtensionArray.from_storage(
        tensor_type, pa.FixedSizeListArray.from_arrays(
            pa.array(d.images.astype(np.float32).reshape(-1)), 64))
    pq.write_table(pa.table({"pixels": pixels, "label": pa.array(d.target.astype(np.int64))}),
                   path)
    return path


def tabular_csv(path: Path, which: str) -> Path:
    """iris, wine (classifiers) or diabetes (regressor, unscaled) as a CSV with ``label``."""
    from sklearn import datasets as sk

    if which == "diabetes":
        data = sk.load_diabetes(scaled=False)
        y = data.target.astype(np.float64)
    else:
        data = getattr(sk, f"load_{which}")()
        y = data.target.astype(np.int64)
    names = [f"x{i}" for i in range(data.data.shape[1])]
    cols = {n: pa.array(data.data[:, i]) for i, n in enumerate(names)}
    cols["label"] = pa.array(y)
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.table(cols), path)
    return path


INTENTS = {
    "greet": ["hello {who}", "hi {who}, good {time}", "good {time} {who}", "hey there {who}"],
    "weather": ["what is the weather in {city}", "will it rain in {city} {day}",
                "is it sunny in {city} {day}", "temperature in {city} please"],
    "book_flight": ["book a flight to {city} {day}", "i need a plane ticket to {city}",
                    "fly me to {city} {day}", "reserve a seat on a flight to {city}"],
    "play_music": ["play some {genre} music", "put on {genre} songs {who}",
                   "i want to hear {genre}", "start my {genre} playlist"],
    "set_alarm": ["wake me up at {hour}", "set an alarm for {hour} {day}",
                  "alarm at {hour} please", "remind me at {hour} to get up"],
    "goodbye": ["bye {who}", "see you {day} {who}", "goodbye and thanks {who}",
                "talk to you later {who}"],
}
FILL = {"who": ["anna", "bob", "friend", "bot", "everyone", ""],
        "time": ["morning", "evening", "afternoon"],
        "city": ["paris", "tokyo", "lima", "oslo", "cairo", "denver"],
        "day": ["today", "tomorrow", "on monday", "this weekend", ""],
        "genre": ["jazz", "rock", "classical", "techno", "folk"],
        "hour": ["6am", "7 30", "noon", "five o clock", "8am"]}


def intents_jsonl(path: Path, *, rows: int = 600, seed: int = 0) -> Path:
    """A chat bot's intent corpus: templated sentences, six intents, JSON lines."""
    rng = np.random.default_rng(seed)
    names = sorted(INTENTS)
    buf = io.StringIO()
    import json

    for _ in range(rows):
        intent = names[int(rng.integers(len(names)))]
        template = INTENTS[intent][int(rng.integers(len(INTENTS[intent])))]
        text = template.format(**{k: v[int(rng.integers(len(v)))] for k, v in FILL.items()})
        text = text.strip().capitalize() + ("?" if rng.random() < 0.3 else "")
        buf.write(json.dumps({"utterance": text, "label": intent}) + "\n")
    path.write_text(buf.getvalue())
    return path


def digits_png_bytes(index: int = 0) -> bytes:
    """One digit as PNG bytes."""
    from sklearn.datasets import load_digits

    img = np.clip(load_digits().images[index] * (255 / 16), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img, mode="L").save(buf, format="PNG")
    return buf.getvalue()
