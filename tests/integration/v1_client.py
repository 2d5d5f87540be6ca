"""FfDL-shaped requests for the /v1 tests: the manifest and model zip as FfDL's CLI sends
them (`ffdl train manifest.yml model.zip`: a multipart form of `manifest` and
`model_definition` files, `version` in the query)."""

from __future__ import annotations

import httpx

from tests.integration.api_harness import MODEL_ZIP

VERSION = {"version": "2017-02-13"}

# FfDL's own example (etc/examples/tf-model/manifest.yml), its data container renamed per test
FFDL_MANIFEST = """\
name: tf_convolutional_network_tutorial
description: Convolutional network model using tensorflow
version: "1.0"
gpus: 0
cpus: 0.5
memory: 1Gb
learners: 1
data_stores:
  - id: sl-internal-os
    type: mount_cos
    training_data:
      container: {container}
    training_results:
      container: tf_trained_model
    connection:
      auth_url: http://s3.default.svc.cluster.local
      user_name: test
      password: test
framework:
  name: tensorflow
  version: "1.5.0-py3"
  command: >
    python3 convolutional_network.py --trainImagesFile ${{DATA_DIR}}/train-images-idx3-ubyte.gz
      --trainLabelsFile ${{DATA_DIR}}/train-labels-idx1-ubyte.gz
evaluation_metrics:
  type: tensorboard
  in: "$JOB_STATE_DIR/logs/tb"
"""


async def with_training_data(client: httpx.AsyncClient, container: str) -> bytes:
    """FfDL's example manifest, its training data uploaded to `container` first."""
    put = await client.put(f"/v2/data/{container}/train-images-idx3-ubyte.gz", content=b"x")
    assert put.status_code in (200, 201), put.text
    return FFDL_MANIFEST.format(container=container).encode()


async def post_model(
    client: httpx.AsyncClient,
    manifest: bytes | None,
    model: bytes | None = MODEL_ZIP,
    **request: object,
) -> httpx.Response:
    files = {}
    if manifest is not None:
        files["manifest"] = ("manifest.yml", manifest, "application/octet-stream")
    if model is not None:
        files["model_definition"] = ("model.zip", model, "application/octet-stream")
    return await client.post("/v1/models", params=VERSION, files=files, **request)


async def new_model(client: httpx.AsyncClient, container: str) -> str:
    """A model of `client`'s user, posted with its training data in `container`."""
    manifest = await with_training_data(client, container)
    created = await post_model(client, manifest)
    assert created.status_code == 201, created.text
    model_id: str = created.json()["model_id"]
    return model_id
