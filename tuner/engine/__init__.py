"""Reference inference engine in PyTorch/Triton, in the spirit of gpt-fast.

model.py (Llama/MoE decoder), weights.py (random init / HF safetensors), quantize.py (weight
variants), kv_cache.py (paged KV), scheduler.py (continuous batching), speculative.py
(acceptance rules), generate.py (the engine loop), kernels/ (Triton). Importing this package
requires torch; `import tuner` does not import it.
"""
