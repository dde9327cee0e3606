"""Trial: does ``tf.distribute.ParameterServerStrategy`` run a Keras 3 custom step?

1 chief (coordinator) + 1 worker + 1 ps, on loopback. Seen here: one step scheduled through
``ClusterCoordinator.schedule`` ran and returned a loss. Why the trainer still refuses
TensorFlow + parameter_server: see ``headrace/trainers/distributed/plan.py``.

    python bench/try_tf_parameter_server.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from headrace.core.ports import LOOPBACK, free_ports


def serve(role: str) -> None:
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(json.loads(os.environ["CLUSTER"]))
    tf.distribute.Server(cluster, job_name=role, task_index=0, protocol="grpc").join()


def coordinate(cluster: dict[str, list[str]]) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                          "task": {"type": "chief", "index": 0}})
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(3, activation="softmax")])
        opt = keras.optimizers.Adam(0.01)
    x = np.random.rand(32, 4).astype("float32")
    y = np.random.randint(0, 3, 32)

    @tf.function
    def step() -> Any:
        def replica(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                per = keras.losses.sparse_categorical_crossentropy(yb, model(xb, training=True))
                loss = tf.nn.compute_average_loss(per, global_batch_size=32)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica, args=(tf.constant(x), tf.constant(y)))

    result = coordinator.schedule(step)
    coordinator.join()
    print("ParameterServerStrategy custom step ran; loss", result.fetch(), flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        serve(sys.argv[1])
        return
    p = free_ports(3)
    cluster = {"chief": [f"{LOOPBACK}:{p[0]}"], "worker": [f"{LOOPBACK}:{p[1]}"],
               "ps": [f"{LOOPBACK}:{p[2]}"]}
    env = dict(os.environ, CLUSTER=json.dumps(cluster), TF_CPP_MIN_LOG_LEVEL="2")
    procs = [subprocess.Popen([sys.executable, __file__, role], env=env)
             for role in ("worker", "ps")]
    try:
        coordinate(cluster)
    finally:
        for proc in procs:
            proc.kill()


if __name__ == "__main__":
    main()
