"""Tiny random HF-format checkpoints (`tiny_model.py`) with a WordLevel tokenizer of Qwen-style
special and `<s_a_N>` SID tokens (`tiny_tokenizer.py`), for tests, benches and the demo's toy
recommender: not part of the serving model code (`model/`), and free of transformers."""
