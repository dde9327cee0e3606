"""Which gradient-boosting library a table's booster should be, against scikit-learn's
GradientBoostingClassifier, on held-out rows of generated and bundled tables.

Contenders, side by side on the same splits (stratified: 75 % to fit, 25 % held out):

- ``lightgbm``: LGBMClassifier, learning rate 0.05, up to 2000 trees, early stopping after 50
  rounds on 15 % of the fitting rows (stratified), refit on all of them at the best count;
- ``xgboost``: XGBClassifier (hist), the same rate, cap, early stopping and refit;
- ``sklearn``: GradientBoostingClassifier with its defaults (100 trees, rate 0.1, depth 3): the
  bar the booster default must at least match.

Tables: ``make_classification`` at seeds 0..N-1 (2,000 rows, 20 columns of which 8
informative and 4 redundant, 3 classes, 3 % flipped labels), and scikit-learn's bundled
breast_cancer, wine, iris and digits. Prints held-out accuracy and log loss per table and the
mean of each, the fitting time, and the win/tie/loss count of each booster against sklearn.

    python bench/bench_boosters.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_classification,
)
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split

RATE, CAP, PATIENCE, VAL = 0.05, 2000, 50, 0.15


def tables(seeds: int) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    for s in range(seeds):
        x, y = make_classification(n_samples=2000, n_features=20, n_informative=8,
                                   n_redundant=4, n_classes=3, flip_y=0.03, random_state=s)
        yield f"generated-{s}", x, y
    for name, load in (("breast_cancer", load_breast_cancer), ("wine", load_wine),
                       ("iris", load_iris), ("digits", load_digits)):
        d = load()
        yield name, d.data, d.target


def _stopped_then_refit(make: Callable[[int], Any], fit_es: Callable[[Any, Any, Any, Any, Any],
                        int], x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    """Early stopping on a stratified slice picks the tree count; refit on every row."""
    xf, xv, yf, yv = train_test_split(x, y, test_size=VAL, stratify=y, random_state=seed)
    best = fit_es(make(CAP), xf, yf, xv, yv)
    return make(max(best, 1)).fit(x, y)


def lightgbm(x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    import lightgbm as lgb

    def make(n: int) -> Any:
        return lgb.LGBMClassifier(n_estimators=n, learning_rate=RATE, random_state=seed,
                                  verbose=-1, n_jobs=1)

    def fit_es(m: Any, xf: Any, yf: Any, xv: Any, yv: Any) -> int:
        m.fit(xf, yf, eval_X=(xv,), eval_y=(yv,),
              callbacks=[lgb.early_stopping(PATIENCE, verbose=False)])
        return int(m.best_iteration_)

    return _stopped_then_refit(make, fit_es, x, y, seed)


def xgboost(x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    import xgboost as xgb

    def make(n: int, stop: bool = False) -> Any:
        return xgb.XGBClassifier(n_estimators=n, learning_rate=RATE, tree_method="hist",
                                 random_state=seed, n_jobs=1,
                                 early_stopping_rounds=PATIENCE if stop else None)

    def fit_es(_m: Any, xf: Any, yf: Any, xv: Any, yv: Any) -> int:
        m = make(CAP, stop=True).fit(xf, yf, eval_set=[(xv, yv)], verbose=False)
        return int(m.best_iteration) + 1

    return _stopped_then_refit(make, fit_es, x, y, seed)


def sklearn(x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    return GradientBoostingClassifier(random_state=seed).fit(x, y)


CONTENDERS = {"lightgbm": lightgbm, "xgboost": xgboost, "sklearn": sklearn}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"{'table':16} " + " ".join(f"{c:>22}" for c in CONTENDERS) + "   (accuracy / log loss)")
    for name, x, y in tables(args.seeds):
        xt, xh, yt, yh = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
        row: dict[str, Any] = {"table": name}
        for c, fit in CONTENDERS.items():
            t0 = time.perf_counter()
            model = fit(xt, yt, 0)
            row[f"{c}_s"] = time.perf_counter() - t0
            p = model.predict_proba(xh)
            row[f"{c}_acc"] = accuracy_score(yh, p.argmax(axis=1))
            row[f"{c}_ll"] = log_loss(yh, p, labels=np.unique(y))
        rows.append(row)
        print(f"{name:16} " + " ".join(f"{row[c + '_acc']:>12.4f} / {row[c + '_ll']:.4f}"
                                        for c in CONTENDERS), flush=True)
    print(f"{'mean':16} " + " ".join(
        f"{np.mean([r[c + '_acc'] for r in rows]):>12.4f} / "
        f"{np.mean([r[c + '_ll'] for r in rows]):.4f}" for c in CONTENDERS))
    print("fit seconds (sum): " + ", ".join(
        f"{c} {sum(r[c + '_s'] for r in rows):.1f}" for c in CONTENDERS))
    for c in ("lightgbm", "xgboost"):
        d = np.array([r[c + "_acc"] - r["sklearn_acc"] for r in rows])
        print(f"{c} vs sklearn accuracy: {int((d > 1e-9).sum())} better, "
              f"{int((abs(d) <= 1e-9).sum())} equal, {int((d < -1e-9).sum())} worse; "
              f"mean difference {d.mean():+.4f}")


if __name__ == "__main__":
    main()
