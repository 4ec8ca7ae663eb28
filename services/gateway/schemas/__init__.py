"""The request and response bodies of the gateway's routes (pydantic), one module per API."""
