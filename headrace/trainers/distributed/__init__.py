"""Distributed training without framework imports: which strategy a request gets
(:mod:`.plan`), what each gang member is told about its peers (:mod:`.peers`) and how the local
executor runs a whole gang on one machine (:mod:`.gang`). The framework halves live in
``headrace.trainers.backends.tf_allreduce`` and ``headrace.trainers.backends.mxnet_ps``."""
