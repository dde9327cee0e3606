"""The text family's alternative to its trained network: the n-gram logistic regression of the
training split, over the very ids the model sees (tokens, hashed bigrams and lead ids, each
weighted by its share of the row's ids times ``WIDE_SCALE``, as the family's wide part averages
them).

Framework-free (NumPy, SciPy). As a ``LinearStart`` it is a text model's weights: its per-id
logits (the wide part) set to these, its deep output at zero with this bias, so the same layers
predict exactly the regression. The network trains from its own initial weights (started here,
the regression's near-perfect fit of the training rows would leave the deep part nothing to
learn); the job keeps this start's checkpoint and publishes it unless the trained network beats
it on the validation rows (``start_check``). Where a bag of n-grams is all the signal, the
regression is what a few hundred rows support; where word order matters, the network wins.

The L2 penalty is chosen from ``CS`` by stratified 3-fold cross-validation on the training
split (log loss), as scikit-learn's ``LogisticRegressionCV`` does: nothing is hand-set.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize  # type: ignore[import-untyped]
import scipy.sparse  # type: ignore[import-untyped]

from headrace.codecs import text as text_codec
from headrace.codecs.stats import InputStats
from headrace.store.signature import ModelInput
from headrace.trainers.linear_start import LinearStart

CS = (0.1, 1.0, 10.0, 100.0)  # inverse penalties tried (scikit-learn's C)
FOLDS = 3
MAX_ITER = 500
GTOL = 1e-4  # on the summed loss's gradient: far below what moves a prediction


def features(ids: np.ndarray, rows: int) -> scipy.sparse.csr_matrix:
    """Each row's ids as the wide part sees them: every non-padding id weighs
    ``WIDE_SCALE / (the row's non-padding ids)``."""
    mask = ids > 0
    count = np.maximum(mask.sum(axis=1), 1)
    r = np.nonzero(mask)[0]
    weight = (text_codec.WIDE_SCALE / count)[r]
    return scipy.sparse.csr_matrix((weight, (r, ids[mask].astype(np.int64))),
                                   shape=(len(ids), rows))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _loss(params: np.ndarray, x: scipy.sparse.csr_matrix, onehot: np.ndarray, c: float
          ) -> tuple[float, np.ndarray]:
    k = onehot.shape[1]
    w = params[:-k].reshape(x.shape[1], k)
    logp = _log_softmax(x @ w + params[-k:])
    diff = np.exp(logp) - onehot
    loss = -float((onehot * logp).sum()) + 0.5 / c * float((w * w).sum())
    grad = np.concatenate([(x.T @ diff + w / c).ravel(), diff.sum(axis=0)])
    return loss, grad


def fit(x: scipy.sparse.csr_matrix, y: np.ndarray, k: int, c: float,
        warm: np.ndarray | None = None) -> np.ndarray:
    """The parameters (weights (features, k) then bias (k,), flat) of the multinomial logistic
    regression minimising the summed log loss plus ``|weights|^2 / (2c)`` (the bias
    unpenalised), from ``warm`` if given. Conjugate gradients: vector operations only (a
    quasi-Newton solver's BLAS threads crawl on a loaded node)."""
    onehot = np.eye(k)[y]
    start = np.zeros(x.shape[1] * k + k) if warm is None else warm
    res = scipy.optimize.minimize(_loss, start, args=(x, onehot, c), jac=True, method="CG",
                                  options={"maxiter": MAX_ITER, "gtol": GTOL})
    return np.asarray(res.x)


def _split(params: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return params[:-k].reshape(-1, k), params[-k:]


def _folds(y: np.ndarray) -> np.ndarray:
    """A fold number a row, each class dealt round the folds (a fixed shuffle)."""
    out = np.empty(len(y), np.int64)
    rng = np.random.default_rng(0)
    for label in np.unique(y):
        at = rng.permutation(np.nonzero(y == label)[0])
        out[at] = np.arange(len(at)) % FOLDS
    return out


def _log_loss(x: scipy.sparse.csr_matrix, y: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    logp = _log_softmax(x @ w + b)
    return -float(logp[np.arange(len(y)), y].mean())


def choose_c(x: scipy.sparse.csr_matrix, y: np.ndarray, k: int) -> float:
    """The ``CS`` entry with the least cross-validated log loss (each fold's path warm-started
    from the previous, smaller ``c``)."""
    folds = _folds(y)
    scores = np.zeros(len(CS))
    for f in range(FOLDS):
        train, held = folds != f, folds == f
        params = None
        for i, c in enumerate(CS):
            params = fit(x[train], y[train], k, c, params)
            scores[i] += _log_loss(x[held], y[held], *_split(params, k)) * int(held.sum())
    return CS[int(np.argmin(scores))]


def ngram_start(family: str, inputs: tuple[ModelInput, ...], stats: dict[str, InputStats],
                columns: dict[str, np.ndarray], y: np.ndarray, n_classes: int
                ) -> LinearStart | None:
    """The start of a ``text`` classifier fed host-side ids; None for anything else."""
    if family != "text" or n_classes < 2 or len(inputs) != 1:
        return None
    inp = inputs[0]
    st = stats.get(inp.name)
    values = columns.get(inp.name)
    # The family admits one text input (``check_family``); user-shaped plans take strings.
    if st is None or values is None or text_codec.in_graph(inp, exported=False):
        return None
    labels = np.asarray(y).astype(np.int64).reshape(-1)
    if (len(labels) < 2 * FOLDS * n_classes
            or np.bincount(labels, minlength=n_classes).min() < FOLDS):
        return None  # too few rows a class to cross-validate the penalty
    rows = text_codec.id_count(inp, len(st.vocabulary))
    ids = text_codec.token_ids(inp, np.asarray(values, object), st.vocabulary)
    x = features(ids, rows)
    used = np.unique(x.indices)  # ids never seen in training keep zero logits
    xs = x[:, used]
    c = choose_c(xs, labels, n_classes)
    w, b = _split(fit(xs, labels, n_classes, c), n_classes)
    weights = np.zeros((rows, n_classes), np.float32)
    weights[used] = w
    return LinearStart(weights, b.astype(np.float32), 1.0 / c,
                       kind="n-gram logistic regression")
