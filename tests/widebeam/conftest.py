"""The end-to-end tests run the stack over the decoder tests' tiny SID model."""

from tests.services.decoder.conftest import sid_model  # noqa: F401 (fixture)
