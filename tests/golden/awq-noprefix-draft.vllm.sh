#!/bin/sh
exec vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype float16 \
    --quantization awq_marlin \
    --kv-cache-dtype auto \
    --max-num-seqs 23 \
    --max-num-batched-tokens 11264 \
    --tensor-parallel-size 1 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --no-enable-prefix-caching \
    --enable-chunked-prefill \
    --speculative-config '{"model":"meta-llama/Llama-3.2-1B-Instruct","num_speculative_tokens":3}'
