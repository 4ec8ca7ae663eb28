"""Search strategies, on explicit tensors (they know nothing of the scheduler or the runner's
request state): HF-exact beam search (`beam_search.py`, its vectorised step `beam_step.py`,
the streamed expansion `beam_expansion.py` with its candidates `beam_candidates.py` /
`beam_row_topk.py`, its packed outputs `beam_step_outputs.py` and their host copies
`beam_host_step.py`, the dense path's log-probs `beam_logprobs.py`), and for beam width 1
greedy or sampled decoding (`greedy.py`, token choice in `sampling.py`). Each step returns a
`StepSelection` (`step_selection.py`)."""
