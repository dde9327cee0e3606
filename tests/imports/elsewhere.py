"""Models trained elsewhere, as their own libraries save them, on generated tables (scikit-learn's
make_classification with a seed, iris, digits, diabetes), each library at its defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = tuple(f"f{i}" for i in range(6))


def table(seed: int, *, rows: int = 600, classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=rows, n_features=len(FEATURES), n_informative=4,
                               n_redundant=1, n_classes=classes, random_state=seed)
    return x.astype(np.float32), y.astype(np.int64)


def frame(x: np.ndarray) -> Any:
    import pandas as pd

    return pd.DataFrame(x, columns=list(FEATURES))


def records(x: np.ndarray) -> list[dict[str, Any]]:
    return [{f: float(v) for f, v in zip(FEATURES, row, strict=True)} for row in x]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def put_sample(dfs: Path, name: str, x: np.ndarray, y: np.ndarray) -> str:
    """A labelled Parquet dataset on the DFS (as ``datasets put`` stores one); its URI."""
    out = dfs / "datasets" / f"{name}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = {f: pa.array(x[:, i]) for i, f in enumerate(FEATURES)}
    pq.write_table(pa.table({**cols, "label": pa.array(y)}), out)
    return f"datasets/{name}.parquet"


def sklearn_pipeline(out: Path, x: np.ndarray, y: np.ndarray, *, estimator: str = "gb") -> Path:
    import joblib
    from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    est = (GradientBoostingClassifier(random_state=0) if estimator == "gb"
           else HistGradientBoostingClassifier(random_state=0))
    model = make_pipeline(StandardScaler(), est).fit(frame(x), y)
    joblib.dump(model, out)
    return out


def lightgbm_booster(out: Path, x: np.ndarray, y: np.ndarray, *, regression: bool = False
                     ) -> Path:
    import lightgbm as lgb

    k = len(np.unique(y))
    params: dict[str, Any] = ({"objective": "regression"} if regression else
                              {"objective": "binary"} if k == 2 else
                              {"objective": "multiclass", "num_class": k})
    booster = lgb.train({**params, "verbose": -1}, lgb.Dataset(frame(x), y))
    booster.save_model(str(out))
    return out


def xgboost_booster(out: Path, x: np.ndarray, y: np.ndarray, *, regression: bool = False
                    ) -> Path:
    import xgboost as xgb

    k = len(np.unique(y))
    params: dict[str, Any] = ({"objective": "reg:squarederror"} if regression else
                              {"objective": "binary:logistic"} if k == 2 else
                              {"objective": "multi:softprob", "num_class": k})
    booster = xgb.train(params, xgb.DMatrix(frame(x), y))
    booster.save_model(str(out))
    return out


def onnx_logistic(out: Path, x: np.ndarray, y: np.ndarray) -> Path:
    """An ONNX file from another producer: skl2onnx over a NumPy-fitted model (one [N, 6]
    input named X, a ZipMap of probabilities)."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit(x, y)
    out.write_bytes(to_onnx(model, x[:1]).SerializeToString())
    return out


def _torch_mlp(x: np.ndarray, y: np.ndarray) -> Any:
    import torch

    torch.manual_seed(0)
    k = int(y.max()) + 1
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, k), torch.nn.Softmax(dim=1))
    opt = torch.optim.Adam(net.parameters())
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(50):
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(torch.log(net(xs) + 1e-7), ys)
        loss.backward()
        opt.step()
    return net.eval()


def torchscript_module(out: Path, x: np.ndarray, y: np.ndarray) -> Path:
    import torch

    torch.jit.save(torch.jit.script(_torch_mlp(x, y)), str(out))
    return out


def torch_export_program(out: Path, x: np.ndarray, y: np.ndarray) -> Path:
    import torch

    net = _torch_mlp(x, y)
    batch = torch.export.Dim("batch")
    program = torch.export.export(net, (torch.from_numpy(x[:8]),),
                                  dynamic_shapes=({0: batch},))
    torch.export.save(program, str(out))
    return out


def keras_model(out: Path, x: np.ndarray, y: np.ndarray) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    k = int(y.max()) + 1
    model = keras.Sequential([keras.Input((x.shape[1],), name="features"),
                              keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(k, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=5, verbose=0)
    model.save(out)
    return out


MAKERS: dict[str, tuple[str, Callable[[Path, np.ndarray, np.ndarray], Path]]] = {
    "sklearn": ("model.joblib", sklearn_pipeline),
    "lightgbm": ("model.txt", lightgbm_booster),
    "xgboost": ("model.json", xgboost_booster),
    "onnx": ("model.onnx", onnx_logistic),
    "torchscript": ("model.pt", torchscript_module),
    "torch.export": ("model.pt2", torch_export_program),
    "keras": ("model.keras", keras_model),
}
# What each format needs declared (the rest say it themselves).
DECLARED: dict[str, list[str]] = {
    "onnx": ["--input", "X:numeric=" + ",".join(FEATURES)],
    "torchscript": ["--input", "input:numeric=" + ",".join(FEATURES)],
    "torch.export": ["--input", "input:numeric=" + ",".join(FEATURES)],
    "keras": ["--input", "features:numeric=" + ",".join(FEATURES)],
}
