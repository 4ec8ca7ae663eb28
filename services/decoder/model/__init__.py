"""Own Qwen3/Qwen2/Llama forward over HF checkpoints.

Modules: ``config`` (ModelConfig, GenerationDefaults), ``weights`` (safetensors loading),
``layers`` (RMSNorm, rope, SwiGLU), ``attention_context`` (the KV/attention seam),
``transformer`` (CausalLM), ``tiny`` (random test/demo checkpoints). Nothing is re-exported here
so that importing one light module (e.g. config) does not pull in torch.
"""
