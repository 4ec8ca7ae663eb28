"""The `widebeam` command and what it runs outside the services: the CLI (`cli.py`,
`settings_cli.py`: every service's settings as flags), the one-command stack (`launcher/`:
`widebeam up`), the demo recommender's build and showcase (`demo/`, `showcase.py`), offline
evaluation against a gateway (`eval/`) and the load generator (`loadgen/`), and the GPU kernels
with their torch references (`kernels/`). The services (`services/`) are mapped into this
package as `widebeam.services` (setup.py). The kernels live inside the package folder: a
top-level `kernels/` shadowed the Hugging Face `kernels` package that transformers imports,
whenever the repository root was on the path (the tests)."""
