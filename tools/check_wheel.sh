#!/usr/bin/env bash
# CI: build the wheel and install each extra ALONE in a fresh virtual environment, then run
# `headrace --help` and that role's command there, outside the checkout, so that an import a
# role does not install (or a file the wheel does not carry) fails here and not for a user.
#   tools/check_wheel.sh            every extra (base, control, trainer, scorer+tensorflow,
#                                   scorer+mxnet, topology, all with `headrace demo`, and
#                                   torch+jax+onnx with scorer+trainer in one environment, and
#                                   imports+mlflow importing a scikit-learn model)
#   tools/check_wheel.sh base all   only these
# Each environment prints the NumPy and pyarrow it resolved: NumPy 2 wherever MXNet is not
# installed (asserted); `mxnet` pins numpy<2 and pyarrow<23, and `all` holds mxnet, so those two
# resolve NumPy 1.
# Installs go through uv (its own venv, .venv-uv, or $UV): hardlinks from one download cache, so
# the environments cost one download of TensorFlow, MXNet and PyTorch, not one install each.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
unset PYTHONPATH VIRTUAL_ENV
# The environments must not see a broker, DFS or settings of the machine running the check.
for v in $(env | sed -n 's/^\(HEADRACE_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done

UV=${UV:-$HERE/.venv-uv/bin/uv}
if [ ! -x "$UV" ]; then
  "$PY" -m venv "$HERE/.venv-uv"
  "$HERE/.venv-uv/bin/python" -m pip install -q uv
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/headrace-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export XDG_DATA_HOME=$WORK/data XDG_STATE_HOME=$WORK/state  # no broker state, no user DFS
cd "$WORK"  # never the checkout: `headrace` must come from the installed wheel

start=$SECONDS
"$PY" -m pip wheel --quiet --no-deps --disable-pip-version-check -w "$WORK/dist" "$HERE"
WHEEL=$(ls "$WORK"/dist/headrace-*.whl)
echo "== built $(basename "$WHEEL") in $((SECONDS - start)) s"

run() {  # run NAME CMD...: a role's command in its environment; its output shown on failure
  local name=$1; shift
  if ! "$@" >"$WORK/$name.out" 2>&1; then
    echo "FAILED ($name): $*" >&2
    tail -n 40 "$WORK/$name.out" >&2
    return 1
  fi
}

check() {  # check EXTRA: a fresh environment with the wheel and only EXTRA
  local extra=$1 t0=$SECONDS env spec
  env=$WORK/env-${extra//[^a-z]/-}
  spec=$WHEEL; [ "$extra" = base ] || spec="$WHEEL[$extra]"
  "$UV" venv --quiet -p "$PY" "$env"
  "$UV" pip install --quiet -p "$env/bin/python" "$spec"
  local h=$env/bin/headrace
  run "$extra-versions" "$env/bin/python" -c \
    "import numpy, pyarrow; print(f'numpy {numpy.__version__}, pyarrow {pyarrow.__version__}')"
  echo "== $extra: $(cat "$WORK/$extra-versions.out")"
  case ",$extra," in
    *,mxnet,*|*,all,*) ;;  # MXNet needs NumPy 1 (its extra pins it)
    *) run "$extra-numpy2" "$env/bin/python" -c \
         "import numpy; assert int(numpy.__version__.split('.')[0]) >= 2, numpy.__version__" ;;
  esac
  run "$extra-help" "$h" --help
  run "$extra-version" "$h" --version
  case "$extra" in
    base)
      run base-send "$h" send --help
      # A role's command without its extra: one line naming the extra, exit 2, no traceback.
      if "$h" topology plan -c "$HERE/examples/cluster.yaml" >"$WORK/base-topo.out" 2>&1 \
         || ! grep -q "pip install 'headrace\[kubernetes\]'" "$WORK/base-topo.out" \
         || grep -q Traceback "$WORK/base-topo.out"; then
        echo "FAILED (base): topology plan without its extra should name it" >&2
        cat "$WORK/base-topo.out" >&2; return 1
      fi ;;
    control)
      run control "$h" control --help
      run control-import "$env/bin/python" -c \
        "import headrace.trainers.control.app, headrace.trainers.control.service" ;;
    trainer)
      run trainer "$h" train --help
      run trainer-import "$env/bin/python" -c "import headrace.trainers.job_process" ;;
    scorer,tensorflow|scorer,mxnet)
      run "$extra" "$h" score --help
      run "$extra-import" "$env/bin/python" -c \
        "import headrace.scorers.serving, headrace.scorers.adapters.${extra#scorer,}" ;;
    topology)
      run topology "$h" topology plan -c "$HERE/examples/cluster.yaml" \
        --manifests "$WORK/manifests"  # renders the chart the wheel ships
      ls "$WORK"/manifests/*.yaml >/dev/null
      # apply finds that chart with no --chart (--render: the objects, no cluster needed)
      run topology-apply "$h" topology apply -c "$HERE/examples/cluster.yaml" --render
      grep -q "kind: StatefulSet" "$WORK/topology-apply.out" ;;
    scorer,trainer,torch,jax,onnx)
      # The frameworks beside the engine, each handed NumPy 2 arrays (and giving them back).
      run "$extra-import" "$env/bin/python" -c "$FRAMEWORKS_SMOKE" ;;
    imports,mlflow)
      # A model trained elsewhere, imported with only this extra (no TensorFlow, no torch).
      run "$extra-fit" "$env/bin/python" -c "$IMPORT_SMOKE" "$WORK/iris.joblib"
      run "$extra-import" "$h" --dfs-root "$WORK/dfs" models import "$WORK/iris.joblib" \
        --name iris
      grep -q "imported" "$WORK/$extra-import.out" ;;
    all)
      run all-demo "$h" demo
      grep -q "image accuracy" "$WORK/all-demo.out" \
        || { echo "FAILED (all): the demo did not score the digits" >&2;
             tail -n 40 "$WORK/all-demo.out" >&2; return 1; }
      grep "accuracy" "$WORK/all-demo.out" | tail -n 2 ;;
  esac
  echo "== $extra: ok in $((SECONDS - t0)) s"
  rm -rf "$env"
}

FRAMEWORKS_SMOKE='
import os
os.environ["KERAS_BACKEND"] = "jax"  # the jax extra: Keras without TensorFlow
import numpy as np, torch, torchvision, jax.numpy as jnp, keras, onnx, onnxruntime as ort
from onnx import TensorProto, helper
import headrace.scorers.serving, headrace.trainers.job_process
x = np.arange(6, dtype=np.float32).reshape(2, 3)
assert np.array_equal(torch.from_numpy(x).mul(2).numpy(), x * 2)
net = torchvision.models.resnet18(weights=None, num_classes=3).eval()
with torch.inference_mode():
    assert net(torch.from_numpy(np.zeros((1, 3, 32, 32), np.float32))).numpy().shape == (1, 3)
assert np.array_equal(np.asarray(jnp.asarray(x) * 2), x * 2)
assert keras.ops.convert_to_numpy(keras.ops.add(x, x)).tolist() == (x * 2).tolist()
io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"]
g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["b"])], "g", io[:1], io[1:])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
assert np.array_equal(s.run(None, {"a": x})[0], x * 2)
print("torch", torch.__version__, "jax", jnp.zeros(1).device, "onnxruntime", ort.__version__)
'

IMPORT_SMOKE='
import sys, joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
x, y = load_iris(return_X_y=True)
joblib.dump(make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), sys.argv[1])
'

extras=("$@")
[ ${#extras[@]} -gt 0 ] || extras=(base control trainer scorer,tensorflow scorer,mxnet topology all
                                   scorer,trainer,torch,jax,onnx imports,mlflow)
for e in "${extras[@]}"; do check "$e"; done
echo "== every extra works alone from the wheel ($((SECONDS - start)) s)"
