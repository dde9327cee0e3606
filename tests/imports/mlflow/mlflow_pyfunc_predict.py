"""Run by the tests under the MLflow server's interpreter: MLflow's own
``mlflow.pyfunc.load_model(MODEL_URI)`` on the rows of a JSON-lines file (one record a line,
as a DataFrame), printing the model's outputs as one JSON list.

    python mlflow_pyfunc_predict.py TRACKING_URI MODEL_URI ROWS_JSONL
"""

from __future__ import annotations

import json
import sys

import mlflow
import numpy as np
import pandas as pd


def main() -> None:
    uri, model_uri, rows = sys.argv[1:4]
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model(model_uri)
    with open(rows) as f:
        frame = pd.DataFrame([json.loads(line) for line in f if line.strip()])
    out = model.predict(frame)
    if isinstance(out, dict):  # an ONNX model fed a dict: output name -> array
        out = next(iter(out.values()))
    if isinstance(out, pd.DataFrame):  # fed a DataFrame: the first output, flattened
        out = np.stack([np.asarray(v, np.float64).ravel() for v in out.iloc[:, 0]])
    print(json.dumps(np.asarray(out, np.float64).reshape(len(frame), -1).tolist()))


if __name__ == "__main__":
    main()
