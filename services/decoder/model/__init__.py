"""Own Qwen3/Qwen2/Llama forward over HF checkpoints.

Modules: ``config`` (ModelConfig, GenerationDefaults), ``weights`` (safetensors loading),
``layers`` (RMSNorm, rope, SwiGLU), ``attention_context`` (the KV/attention seam),
``transformer`` (CausalLM), and ``quantization="fp8"``: ``quantization`` (the decoder layers'
linears to FP8 at load), ``fp8_linear`` (Fp8Linear), ``fp8_checkpoint`` (checkpoints already in
FP8). The tiny random checkpoints of tests and the demo live apart, in
``services/decoder/testing``. Nothing is re-exported here so that importing one light module
(e.g. config) does not pull in torch.
"""
