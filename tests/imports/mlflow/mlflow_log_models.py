"""Run by the tests under the MLflow server's interpreter (``.venv-mlflow``): MLflow's own
client logs real models (sklearn, xgboost, lightgbm, onnx) to the server the tests started,
registers them and sets an alias, then prints one JSON line: per flavor, the run id, the
registered name and version, and the reference predictions of the model's own library on the
rows in ``ROWS`` (what the imported version must reproduce).

    python mlflow_log_models.py TRACKING_URI PREFIX FLAVOR[,FLAVOR...] OUT_JSON
"""

from __future__ import annotations

import json
import sys

import mlflow
import numpy as np
import pandas as pd
from mlflow.models import infer_signature
from sklearn.datasets import load_iris

ALIAS = "champion"


def main() -> None:
    uri, prefix, flavors, out = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(f"{prefix}-import")
    iris = load_iris(as_frame=True)
    x = iris.data.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    y = iris.target.to_numpy()
    rows = x.iloc[::3].reset_index(drop=True)
    result: dict[str, dict[str, object]] = {}
    for flavor in flavors:
        name = f"{prefix}-{flavor}"
        with mlflow.start_run() as run:
            proba = _log(flavor, x, y, rows, name)
            mlflow.log_param("flavor", flavor)
        client = mlflow.MlflowClient()
        version = client.search_model_versions(f"name = '{name}'")[0].version
        client.set_registered_model_alias(name, ALIAS, version)
        result[flavor] = {"run_id": run.info.run_id, "name": name, "version": str(version),
                          "proba": np.asarray(proba, np.float64).tolist()}
    with open(out, "w") as f:
        json.dump({"rows": rows.to_dict(orient="list"), "y": y[::3].tolist(),
                   "models": result}, f)


def _log(flavor: str, x: pd.DataFrame, y: np.ndarray, rows: pd.DataFrame, name: str
         ) -> np.ndarray:
    if flavor == "sklearn":
        from sklearn.ensemble import GradientBoostingClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), GradientBoostingClassifier(
            n_estimators=30, random_state=0)).fit(x, y)
        # MLflow 3's default format (skops) refuses tree nodes unless trusted by name.
        mlflow.sklearn.log_model(model, name="model", registered_model_name=name,
                                 signature=infer_signature(x, model.predict_proba(x)),
                                 skops_trusted_types=["sklearn.tree._tree.Tree"])
        return model.predict_proba(rows)
    if flavor == "xgboost":
        import xgboost as xgb

        model = xgb.XGBClassifier(n_estimators=30, max_depth=3).fit(x, y)
        mlflow.xgboost.log_model(model, name="model", registered_model_name=name,
                                 signature=infer_signature(x, model.predict_proba(x)))
        return model.predict_proba(rows)
    if flavor == "lightgbm":
        import lightgbm as lgb

        model = lgb.LGBMClassifier(n_estimators=30, verbose=-1).fit(x, y)
        mlflow.lightgbm.log_model(model, name="model", registered_model_name=name,
                                  signature=infer_signature(x, model.predict_proba(x)))
        return model.predict_proba(rows)
    if flavor == "onnx":
        import onnxruntime as ort
        from skl2onnx import to_onnx
        from sklearn.linear_model import LogisticRegression

        xs = x.to_numpy(np.float32)
        model = LogisticRegression(max_iter=500).fit(xs, y)
        onx = to_onnx(model, xs[:1], options={id(model): {"zipmap": False}})
        mlflow.onnx.log_model(onx, name="model", registered_model_name=name,
                              signature=infer_signature(xs, model.predict_proba(xs)))
        sess = ort.InferenceSession(onx.SerializeToString())
        return sess.run(None, {sess.get_inputs()[0].name: rows.to_numpy(np.float32)})[1]
    raise SystemExit(f"unknown flavor {flavor}")


if __name__ == "__main__":
    main()
