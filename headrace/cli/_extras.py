"""Which extra installs each library a role imports, so a command run without its extra says
what to install in one line instead of a ModuleNotFoundError traceback."""

from __future__ import annotations

# Top-level module -> the extra that brings it (pyproject.toml [project.optional-dependencies]).
EXTRA_OF: dict[str, str] = {
    "croniter": "control",
    "faust": "control",
    "mode": "control",
    "aiokafka": "control",
    "matplotlib": "trainer",
    "PIL": "scorer",
    "prometheus_client": "scorer",
    "tensorflow": "tensorflow",
    "keras": "tensorflow",
    "mxnet": "mxnet",
    "torch": "torch",
    "torchvision": "torch",
    "kubernetes": "kubernetes",
    "kubernetes_validate": "kubernetes",
    "jsonschema": "kubernetes",  # kubernetes-validate's
    "helm_python": "topology",
    "sklearn": "demo",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "skl2onnx": "imports",
    "onnxmltools": "imports",
    "lightgbm": "imports",
    "xgboost": "imports",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install for ``exc``, or None when it is no role library."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return (f"this command needs {top}, which the {extra!r} extra installs: "
            f"pip install 'headrace[{extra}]' (or 'headrace[all]')")
