"""Everything the engine runs on the device for its running requests. The model's forwards:
prefill and decode over the KV cache (`model_runner.py`), the attention contexts the model calls
per layer, the prefill of prompts whose prefix is cached (`prefix_prefill.py`), and the
CUDA-graph paths — bucketed decode steps, prefill batches and beam
expansions with their static buffers (`*_graphs.py`, `graph_capture.py`), the buckets captured
at start-up (`capture_plan.py`, plain Python) and the count of captures before and after ready
(`capture_counts.py`); attention backends
are driven only through their metadata and graph hooks (`widebeam/kernels/attention/base.py`). The
running requests' tensors: each request's state and slot tables (`request_state.py`, with the
one re-parenting step `apply_selection`), its start (`request_start.py`), a decode step's
inputs (`decode_inputs.py`), the step that advances a request (`request_step.py`) or a cohort of
lockstep beam requests (`beam_cohorts.py`), and the beam stop flags read once per step
(`stop_flags.py`)."""
