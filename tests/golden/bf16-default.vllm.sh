#!/bin/sh
exec vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-num-seqs 64 \
    --max-num-batched-tokens 4096 \
    --tensor-parallel-size 1 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill
