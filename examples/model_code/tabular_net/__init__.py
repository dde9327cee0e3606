"""An example model package for ``headrace code push``: a small residual MLP for tabular data,
one builder per framework (``tabular_net.keras_model:build``, ``tabular_net.gluon_model:build``).
"""
