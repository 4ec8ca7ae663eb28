"""Tests of the deployment files (deploy/, docker-compose.yml, .env.example, the Dockerfiles)
and of the wheel: fast checks without Docker in the suite (schemas, hadolint, manifests,
monitoring, the health probe, `test_wheel.py`), and the `docker`-marked tests that build the
images and run the Compose stack for real, run by `make compose-test` only
(`test_compose_stack.py` with its helpers in `compose_stack.py`, `test_cuda_image_layers.py`)."""
